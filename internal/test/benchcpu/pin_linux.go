package benchcpu

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Pinnable reports whether the benchmarks can give the measured process a
// CPU of its own: two CPUs or more, and taskset to start children on one.
func Pinnable() bool {
	_, err := exec.LookPath("taskset")
	return err == nil && runtime.NumCPU() >= 2
}

// Pin pins every thread of this process to cpu (threads started later
// inherit it from their creator) and returns the function that undoes it.
func Pin(cpu int) (undo func(), err error) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := eachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &set) }); err != nil {
		return func() {}, err
	}
	return func() {
		var all unix.CPUSet
		for i := 0; i < runtime.NumCPU(); i++ {
			all.Set(i)
		}
		_ = eachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &all) })
	}, nil
}

func eachThread(f func(tid int) error) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := f(tid); err != nil {
			return err
		}
	}
	return nil
}

// Command is exec.Command(name, args...) started on cpu by taskset.
func Command(cpu int, name string, args ...string) *exec.Cmd {
	return exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
}
