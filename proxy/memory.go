package proxy

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The memory the proxy may use sets the defaults that bound it: a proxy in
// a container with 512 MiB must shed load with 503s long before the kernel
// ends it, whatever ulimit -n allows.

// Per client connection: the proxy's own bytes for an open stream (about
// 25 KiB, `make bench`) and the kernel's socket buffers on both legs,
// which a cgroup charges to the process too, with room to spare.
const connMemory = 128 << 10

// MemoryLimit is the memory the process may use, in bytes: GOMEMLIMIT
// where set, else the cgroup's memory limit, else the machine's memory; 0
// when none can be read.
func MemoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return l
	}
	if l, ok := CgroupMemoryLimit(); ok {
		return l
	}
	return machineMemory()
}

// CgroupMemoryLimit is the memory limit of the process's cgroup (v2
// memory.max, or v1 memory.limit_in_bytes); ok is false where there is
// none or it cannot be read.
func CgroupMemoryLimit() (int64, bool) {
	return cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
}

// cgroupMemoryLimit reads the limit for the cgroup named in the file
// cgroups under the hierarchy mounted at root.
func cgroupMemoryLimit(cgroups, root string) (int64, bool) {
	data, err := os.ReadFile(cgroups)
	if err != nil {
		return 0, false
	}
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "": // v2
			files = append(files, root+f[2]+"/memory.max", root+"/memory.max")
		case strings.Contains(","+f[1]+",", ",memory,"): // v1
			files = append(files, root+"/memory"+f[2]+"/memory.limit_in_bytes", root+"/memory/memory.limit_in_bytes")
		}
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		// v1 says "no limit" with a huge number (a page-rounded MaxInt64).
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// machineMemory is the machine's memory (MemTotal), or 0.
func machineMemory() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

// defaultMaxBodyMemory is the body budget's default: a quarter of the
// memory the process may use, and at least one body of the largest size
// (else the largest could never pass). 0 (no budget) where the memory is
// unknown.
func defaultMaxBodyMemory(memory int64, maxBody int) int64 {
	if memory <= 0 {
		return 0
	}
	return max(memory/4, int64(maxBody))
}
