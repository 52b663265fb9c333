package matrix

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress shows on stderr what the run is doing: the cell running, its live
// tok/s, the run's elapsed and estimated remaining time. On a terminal it
// redraws one line with a bar; otherwise it prints a plain line when a step
// starts or ends and every few seconds in between. A nil *progress prints
// nothing (--quiet).
type progress struct {
	w        io.Writer
	terminal bool
	start    time.Time
	window   time.Duration

	mu        sync.Mutex
	step      string // what runs now, e.g. "decode C=16K N=4"
	stepStart time.Time
	cellsDone int
	cellsAll  int // decode cells to run (not over capacity)
	lastPlain time.Time

	tokens atomic.Int64 // tokens arrived in the current cell
	last   struct {
		at     time.Time
		tokens int64
		rate   float64
	}
	stop chan struct{}
	done chan struct{}
}

func newProgress(w io.Writer, terminal bool, window time.Duration, cells int) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, terminal: terminal, start: time.Now(), window: window, cellsAll: cells,
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	every := 5 * time.Second
	if p.terminal {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.draw(false)
			p.mu.Unlock()
		}
	}
}

// counter is where the load generator counts arrived tokens; nil when quiet.
func (p *progress) counter() *atomic.Int64 {
	if p == nil {
		return nil
	}
	return &p.tokens
}

// begin announces a step (warm-up, prefill, a decode cell).
func (p *progress) begin(step string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step = step
	p.stepStart = time.Now()
	p.tokens.Store(0)
	p.last.at, p.last.tokens, p.last.rate = p.stepStart, 0, 0
	p.draw(true)
}

// cellDone counts a finished decode cell and shows its status.
func (p *progress) cellDone(label, status string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cellsDone++
	if p.terminal {
		p.clearLine()
	}
	fmt.Fprintf(p.w, "  %-20s %s\n", label, status)
	if p.terminal {
		p.draw(true)
	}
}

// note prints a line of its own (a dropped context, a failure).
func (p *progress) note(s string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		p.clearLine()
	}
	fmt.Fprintln(p.w, s)
	if p.terminal {
		p.draw(true)
	}
}

// close stops the display and leaves the terminal on a fresh line.
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		p.clearLine()
	}
	fmt.Fprintf(p.w, "matrix: %d of %d decode cells run in %s\n", p.cellsDone, p.cellsAll, fmtDur(time.Since(p.start)))
}

func (p *progress) clearLine() { fmt.Fprint(p.w, "\r\033[K") }

// draw writes the status line; force draws a plain line now even if one was
// drawn recently. Called with p.mu held.
func (p *progress) draw(force bool) {
	now := time.Now()
	if dt := now.Sub(p.last.at); dt >= 500*time.Millisecond {
		tok := p.tokens.Load()
		p.last.rate = float64(tok-p.last.tokens) / dt.Seconds()
		p.last.at, p.last.tokens = now, tok
	}
	elapsed := now.Sub(p.start)
	left := time.Duration(p.cellsAll-p.cellsDone) * p.window
	if p.step != "" && strings.HasPrefix(p.step, "decode") {
		left -= min(now.Sub(p.stepStart), p.window)
	}
	if left < 0 {
		left = 0
	}
	rate := ""
	if p.last.rate > 0 || strings.HasPrefix(p.step, "decode") {
		rate = fmt.Sprintf("%8.1f tok/s", p.last.rate)
	}
	if p.terminal {
		const width = 20
		frac := 0.0
		if p.cellsAll > 0 {
			frac = float64(p.cellsDone) / float64(p.cellsAll)
		}
		filled := int(frac * width)
		bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
		p.clearLine()
		fmt.Fprintf(p.w, "%s %d/%d  %-26s %s  elapsed %s  left ~%s", bar, p.cellsDone, p.cellsAll, p.step, rate, fmtDur(elapsed), fmtDur(left))
		return
	}
	if !force && now.Sub(p.lastPlain) < 5*time.Second {
		return
	}
	p.lastPlain = now
	if force {
		rate = "" // a step that just began has no rate yet
	}
	fmt.Fprintf(p.w, "[%s] cell %d/%d  %s  %s  left ~%s\n", fmtDur(elapsed), p.cellsDone, p.cellsAll, p.step, strings.TrimSpace(rate), fmtDur(left))
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	m := int(d / time.Minute)
	s := int((d % time.Minute) / time.Second)
	if m >= 60 {
		return fmt.Sprintf("%d:%02d:%02d", m/60, m%60, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}
