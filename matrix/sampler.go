package matrix

import (
	"context"
	"sync"
	"time"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/record"
)

// sampler scrapes the engine's gauges during a window.
type sampler struct {
	mu         sync.Mutex
	maxWaiting int       // -1 until a scrape succeeded
	lastOK     time.Time // when the last good scrape came in
	running    float64
	samples    int
	err        error
	// slots holds, per task, the last prefix-cache figures the engine
	// gave for a request while it ran (llama.cpp GET /slots), told from
	// a slot's leftovers by watch.
	slots map[int]engines.SlotCache
	watch engines.SlotWatch
}

// sample reads the engine's gauges every Config.LoadEvery until ctx
// ends; done closes when the last reading is in.
func (r *runner) sample(ctx context.Context) (smp *sampler, done <-chan struct{}) {
	smp = &sampler{maxWaiting: -1}
	// The slots' figures before the window's requests take them: what
	// a slot shows of a request that took it, until its prompt starts.
	if sc, ok, _ := r.info.SlotCaches(ctx); ok {
		smp.watch.Seed(sc)
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		smp.run(ctx, r.info, r.cfg.LoadEvery)
	}()
	return smp, d
}

// run scrapes every every until ctx ends: the first scrape soon after the
// window opens, when the requests have reached the engine.
func (s *sampler) run(ctx context.Context, in *engines.Info, every time.Duration) {
	first := time.NewTimer(min(every, 100*time.Millisecond))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		running, waiting, ok, err := in.Load(ctx)
		s.mu.Lock()
		if err != nil && ctx.Err() == nil {
			s.err = err
		}
		if ok && ctx.Err() == nil {
			s.maxWaiting = max(s.maxWaiting, waiting) // from -1 on the first good scrape
			s.lastOK = time.Now()
			s.running += float64(running)
			s.samples++
		}
		s.mu.Unlock()
		if sc, ok, _ := in.SlotCaches(ctx); ok && ctx.Err() == nil {
			s.mu.Lock()
			for _, c := range s.watch.Own(sc) {
				if s.slots == nil {
					s.slots = map[int]engines.SlotCache{}
				}
				s.slots[c.Task] = c
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// observe puts what the scrapes saw into o: the highest waiting gauge, the
// running gauge's mean, when the last good scrape came in (on clock), and
// what the slots said of the prefix cache of the requests they ran. It
// returns the last scrape's error, if any.
func (s *sampler) observe(o *observations, clock record.Clock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o.MaxWaiting, o.AvgRunning = s.maxWaiting, -1
	if s.samples > 0 {
		o.AvgRunning = s.running / float64(s.samples)
	}
	if !s.lastOK.IsZero() {
		o.LastGauge, o.Gauged = clock.At(s.lastOK), true
	}
	o.SlotCaches = o.SlotCaches[:0]
	for _, sc := range s.slots {
		o.SlotCaches = append(o.SlotCaches, sc)
	}
	return s.err
}
