// Package loopcap runs tcpdump on the loopback for the benchmarks that
// hold a load generator to the wire (make bench-wire, make bench-peers):
// nanosecond stamps, whole packets, a 256 MiB buffer, a filter on the
// run's ports, and lo's adapter stamp where it offers one (METHOD §11).
// package wire reads what it writes. It needs root, or CAP_NET_RAW and
// CAP_NET_ADMIN for tcpdump.
package loopcap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tool is tcpdump, found, with the stamp type it takes on lo.
type Tool struct {
	Path string
	// Stamp is the -j time stamp type: "adapter_unsynced" where lo offers
	// it, else "" (tcpdump's default, the host's stamp).
	Stamp string
}

// Find looks tcpdump up on PATH and in /usr/sbin, and asks it which stamp
// types lo offers.
func Find() (*Tool, error) {
	p, err := exec.LookPath("tcpdump")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/tcpdump"); serr != nil {
			return nil, fmt.Errorf("tcpdump is not installed (apt-get install tcpdump): %w", err)
		}
		p = "/usr/sbin/tcpdump"
	}
	tl := &Tool{Path: p}
	if out, err := exec.Command(p, "-J", "-i", "lo").CombinedOutput(); err == nil && bytes.Contains(out, []byte("adapter_unsynced")) {
		tl.Stamp = "adapter_unsynced"
	}
	return tl, nil
}

// StampName says which stamp a capture's times are.
func (tl *Tool) StampName() string {
	if tl.Stamp == "" {
		return "host (the default: lo offers no adapter_unsynced)"
	}
	return tl.Stamp
}

// Check starts and stops a capture, so that one that cannot run fails
// before any load is sent, with what to do.
func (tl *Tool) Check(dir string) error {
	c, err := tl.Start(dir+"/loopcap-probe.pcap", []int{9})
	if err != nil {
		return fmt.Errorf("tcpdump cannot capture on lo: %v\nit needs root or CAP_NET_RAW and CAP_NET_ADMIN (e.g. sudo, or setcap cap_net_raw,cap_net_admin=eip %s)", err, tl.Path)
	}
	_, err = c.Stop()
	_ = os.Remove(dir + "/loopcap-probe.pcap")
	return err
}

// Capture is a running tcpdump.
type Capture struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
}

// Start captures TCP on lo to and from the given ports into file, and
// returns once tcpdump listens.
func (tl *Tool) Start(file string, ports []int) (*Capture, error) {
	var filter []string
	for _, p := range ports {
		filter = append(filter, "port "+strconv.Itoa(p))
	}
	args := []string{"-i", "lo", "-n", "-s", "0", "--time-stamp-precision=nano", "-B", "262144", "-w", file}
	if os.Geteuid() == 0 {
		args = append(args, "-Z", "root") // write the file as root: no switch to the tcpdump user
	}
	if tl.Stamp != "" {
		args = append(args, "-j", tl.Stamp)
	}
	args = append(args, "tcp and ("+strings.Join(filter, " or ")+")")
	cmd := exec.Command(tl.Path, args...)
	pr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Capture{cmd: cmd, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if !sent && strings.Contains(sc.Text(), "listening on") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
		close(c.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s", strings.TrimSpace(c.Text()))
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("tcpdump did not start listening within 20 s: %s", c.Text())
	}
	return c, nil
}

// Text is what tcpdump said on its standard error.
func (c *Capture) Text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// Stop ends the capture (SIGINT: tcpdump flushes its file) and returns
// how many packets the kernel dropped. (Its "received by filter" is no
// measure of loss on lo, where it counts each packet twice, going out and
// coming in, and libpcap keeps one.)
func (c *Capture) Stop() (dropped int, err error) {
	// libpcap hands packets over a block of its ring at a time, a block
	// at the latest when its timeout (tcpdump's, 1 s) passes: packets of
	// a block not yet handed over are lost at SIGINT, though the kernel
	// counted them as received. Wait past it.
	time.Sleep(1500 * time.Millisecond)
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
	}
	_ = c.cmd.Wait()
	captured := false
	for _, line := range strings.Split(c.Text(), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch {
		case strings.Contains(line, "dropped by kernel"):
			dropped, _ = strconv.Atoi(f[0])
		case strings.Contains(line, "packets captured"):
			captured = true
		}
	}
	if !captured {
		return dropped, fmt.Errorf("tcpdump did not end as it should: %s", strings.TrimSpace(c.Text()))
	}
	return dropped, nil
}
