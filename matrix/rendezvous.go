package matrix

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tokentap/tokentap/shard"
)

// Rendezvous fixes a sharded run's common start once every shard is ready
// (METHOD §10), instead of a start on the wall clock given in advance.
// Shard 0 is the coordinator: it serves the rendezvous on Coordinator's
// port; every other shard, once it has probed the engine and made its
// plan, checks in there (POST /rendezvous) and waits. When the last shard
// has checked in, the coordinator sets the start Margin ahead and answers
// every shard with it; a shard that checks in after that is refused, and
// says why.
type Rendezvous struct {
	// Coordinator is shard 0's host:port, e.g. a Kubernetes Indexed Job's
	// stable name <job>-0.<headless service>:7070.
	Coordinator string
	// Resolve, when set, is the address (IP, or IP:port) Coordinator's
	// name stands for: the shards dial it instead of asking DNS, and shard
	// 0 listens on it instead of every interface on Coordinator's port.
	Resolve string
	// Margin is how far ahead of the last check-in the start is set
	// (default shard.DefaultMargin).
	Margin time.Duration
	// Timeout bounds the wait for every shard to check in (default 10m).
	Timeout time.Duration
	// Poll is how long the coordinator holds a check-in open before it
	// answers "still waiting" (default 10 s).
	Poll time.Duration
}

// DefaultRendezvousTimeout is how long shards wait for each other by
// default: an image pull and a node scale-up fit in it.
const DefaultRendezvousTimeout = 10 * time.Minute

// rendezvousPath is where the coordinator serves the rendezvous.
const rendezvousPath = "/rendezvous"

// answer is the coordinator's reply to a check-in.
type answer struct {
	Start   time.Time `json:"start,omitzero"`   // the common start, once fixed
	Waiting string    `json:"waiting,omitzero"` // where the gathering stands, while it waits
	Error   string    `json:"error,omitzero"`   // a refusal, or the coordinator gave up
}

// Check says what is wrong with rv's settings, if anything.
func (rv *Rendezvous) Check() error {
	if _, _, err := rv.addresses(); err != nil {
		return err
	}
	if rv.Margin != 0 && rv.Margin < shard.MinMargin {
		return fmt.Errorf("rendezvous margin %s: at least %s, for the answer to reach every shard", rv.Margin, shard.MinMargin)
	}
	if rv.Timeout < 0 {
		return fmt.Errorf("rendezvous timeout %s: want a positive duration", rv.Timeout)
	}
	return nil
}

// addresses are where shard 0 listens and where the others dial.
func (rv *Rendezvous) addresses() (listen, dial string, err error) {
	host, port, err := net.SplitHostPort(rv.Coordinator)
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("rendezvous coordinator %q: want host:port, e.g. tokentap-matrix-run1-0.tokentap-matrix:7070", rv.Coordinator)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", "", fmt.Errorf("rendezvous coordinator %q: port %q is not a port number", rv.Coordinator, port)
	}
	listen, dial = ":"+port, rv.Coordinator
	if rv.Resolve != "" {
		ip, rport, err := net.SplitHostPort(rv.Resolve)
		if err != nil {
			ip, rport = rv.Resolve, port
		}
		if net.ParseIP(ip) == nil {
			return "", "", fmt.Errorf("rendezvous resolve %q: want an IP address, or IP:port", rv.Resolve)
		}
		listen = net.JoinHostPort(ip, rport)
		dial = listen
	}
	return listen, dial, nil
}

func (rv *Rendezvous) timeout() time.Duration {
	if rv.Timeout > 0 {
		return rv.Timeout
	}
	return DefaultRendezvousTimeout
}

func (rv *Rendezvous) margin() time.Duration {
	if rv.Margin > 0 {
		return rv.Margin
	}
	return shard.DefaultMargin
}

func (rv *Rendezvous) poll() time.Duration {
	if rv.Poll > 0 {
		return rv.Poll
	}
	return 10 * time.Second
}

// newToken names this process among the shards' check-ins.
func newToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// meet is one shard's side of the rendezvous: shard 0 coordinates, the
// others check in. It returns the common start, and stop, which ends the
// coordinator's service (it keeps answering latecomers with a refusal
// until then); waiting reports where the gathering stands as it changes.
func (rv *Rendezvous) meet(ctx context.Context, self shard.CheckIn, waiting func(string)) (start time.Time, stop func(), err error) {
	listen, dial, err := rv.addresses()
	if err != nil {
		return time.Time{}, nil, err
	}
	if self.Index == 0 {
		return rv.coordinate(ctx, listen, self, waiting)
	}
	start, err = rv.checkIn(ctx, dial, self, waiting)
	return start, func() {}, err
}

// coordinator serves the rendezvous on shard 0.
type coordinator struct {
	mu      sync.Mutex
	g       *shard.Gathering
	changed chan struct{} // closed and replaced whenever the gathering changes
	gaveUp  string        // why the coordinator stopped waiting, once it has
	clock   func() time.Time
}

func (c *coordinator) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// serve takes a check-in and answers with the start once fixed,
// "waiting" after holding it poll long, or a refusal. GET shows the
// gathering's state, for a person with curl.
func (c *coordinator) serve(poll time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		reply := func(code int, a answer) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(a)
		}
		if req.Method == http.MethodGet {
			c.mu.Lock()
			a := answer{Start: c.g.Start(), Waiting: c.g.Waiting(), Error: c.gaveUp}
			c.mu.Unlock()
			reply(http.StatusOK, a)
			return
		}
		if req.Method != http.MethodPost {
			reply(http.StatusMethodNotAllowed, answer{Error: "POST a check-in, or GET the state"})
			return
		}
		var in shard.CheckIn
		if err := json.NewDecoder(io.LimitReader(req.Body, 64<<10)).Decode(&in); err != nil {
			reply(http.StatusBadRequest, answer{Error: "a check-in is a JSON object: " + err.Error()})
			return
		}
		held := time.NewTimer(poll)
		defer held.Stop()
		for {
			c.mu.Lock()
			if c.gaveUp != "" {
				msg := c.gaveUp
				c.mu.Unlock()
				reply(http.StatusServiceUnavailable, answer{Error: msg})
				return
			}
			ready := c.g.Ready()
			start, err := c.g.CheckIn(in, c.clock())
			if c.g.Ready() != ready {
				c.notify() // a new shard is in: the coordinator and the others waiting see it
			}
			waiting, changed := c.g.Waiting(), c.changed
			c.mu.Unlock()
			var ref *shard.Refusal
			switch {
			case errors.As(err, &ref):
				reply(http.StatusConflict, answer{Error: ref.Reason})
				return
			case err != nil:
				reply(http.StatusInternalServerError, answer{Error: err.Error()})
				return
			case !start.IsZero():
				reply(http.StatusOK, answer{Start: start})
				return
			}
			select {
			case <-changed:
			case <-held.C:
				reply(http.StatusAccepted, answer{Waiting: waiting})
				return
			case <-req.Context().Done():
				// The shard hung up while held: its process is gone (a
				// retry of a live one posts again at once), so it is not
				// ready, and its index is free for a new process.
				c.mu.Lock()
				if c.g.Leave(in.Index, in.Token) {
					c.notify()
				}
				c.mu.Unlock()
				return
			}
		}
	}
}

// coordinate is shard 0's side: serve check-ins until every shard is in,
// then the start; serve latecomers their refusal until stop.
func (rv *Rendezvous) coordinate(ctx context.Context, listen string, self shard.CheckIn, waiting func(string)) (time.Time, func(), error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("rendezvous: shard 0 cannot listen on %s for the other shards: %w", listen, err)
	}
	c := &coordinator{g: shard.NewGathering(self, rv.margin()), changed: make(chan struct{}), clock: time.Now}
	mux := http.NewServeMux()
	mux.Handle(rendezvousPath, c.serve(rv.poll()))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
	}
	if self.Count == 1 {
		c.mu.Lock()
		_, _ = c.g.CheckIn(self, c.clock()) // alone: the start is fixed at once
		c.mu.Unlock()
	}
	deadline := time.NewTimer(rv.timeout())
	defer deadline.Stop()
	last := ""
	for {
		c.mu.Lock()
		start, state, changed := c.g.Start(), c.g.Waiting(), c.changed
		c.mu.Unlock()
		if !start.IsZero() {
			return start, stop, nil
		}
		if state != last && waiting != nil {
			waiting(state)
			last = state
		}
		select {
		case <-changed:
		case <-ctx.Done():
			stop()
			return time.Time{}, nil, ctx.Err()
		case <-deadline.C:
			c.mu.Lock()
			c.gaveUp = fmt.Sprintf("rendezvous: shard 0 gave up after %s: %s. Are those pods running (kubectl get pods), and can they reach %s? Raise --rendezvous-timeout where pulls or scale-ups take longer",
				rv.timeout(), c.g.Waiting(), rv.Coordinator)
			msg := c.gaveUp
			c.notify()
			c.mu.Unlock()
			// The shards waiting now hear why; then the coordinator goes.
			time.Sleep(200 * time.Millisecond)
			stop()
			return time.Time{}, nil, errors.New(msg)
		}
	}
}

// checkIn is the side of a shard other than 0: post the check-in until
// the coordinator answers with the start, refuses, or the timeout passes.
// Until the coordinator listens (its pod scheduled late, its name not yet
// in DNS) the check-in is tried again every second or two.
func (rv *Rendezvous) checkIn(ctx context.Context, dial string, self shard.CheckIn, waiting func(string)) (time.Time, error) {
	body, err := json.Marshal(self)
	if err != nil {
		return time.Time{}, err
	}
	url := "http://" + dial + rendezvousPath
	client := &http.Client{Timeout: rv.poll() + 10*time.Second}
	deadline := time.Now().Add(rv.timeout())
	pause := 250 * time.Millisecond
	var lastErr error
	last, said := "", ""
	for {
		if time.Now().After(deadline) {
			why := "it never answered"
			if lastErr != nil {
				why = "the last try: " + lastErr.Error()
			}
			if last != "" {
				why = "the coordinator's last word: " + last
			}
			return time.Time{}, fmt.Errorf("rendezvous: shard %d had no start from shard 0 at %s within %s (%s). Is shard 0 running, and is its name in DNS (a headless Service named as the pods' subdomain)? Raise --rendezvous-timeout where pulls or scale-ups take longer",
				self.Index, rv.Coordinator, rv.timeout(), why)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return time.Time{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		if err == nil {
			var a answer
			derr := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a)
			resp.Body.Close()
			switch {
			case derr != nil:
				lastErr = fmt.Errorf("HTTP %d, not a rendezvous answer: %v", resp.StatusCode, derr)
			case resp.StatusCode == http.StatusOK && !a.Start.IsZero():
				if err := shard.CheckStart(a.Start, time.Now()); err != nil {
					return time.Time{}, fmt.Errorf("rendezvous: shard %d: %w", self.Index, err)
				}
				return a.Start, nil
			case resp.StatusCode == http.StatusAccepted:
				if a.Waiting != last && waiting != nil {
					waiting(a.Waiting)
				}
				last, lastErr = a.Waiting, nil
				pause = 250 * time.Millisecond
				continue // the coordinator held it: ask again at once
			case resp.StatusCode == http.StatusConflict:
				return time.Time{}, &shard.Refusal{Reason: "rendezvous: shard 0 refused this shard: " + a.Error}
			case resp.StatusCode == http.StatusServiceUnavailable:
				return time.Time{}, fmt.Errorf("rendezvous: %s", a.Error)
			default:
				lastErr = fmt.Errorf("HTTP %d: %s", resp.StatusCode, a.Error)
			}
		} else {
			lastErr = err
		}
		// Say why it waits as the reason changes, not only at the
		// timeout: the name not yet in DNS, shard 0 not listening yet.
		if lastErr != nil && lastErr.Error() != said && waiting != nil {
			said = lastErr.Error()
			waiting(fmt.Sprintf("shard 0 at %s not reachable yet (%s); trying again until %s",
				rv.Coordinator, said, deadline.UTC().Format(time.RFC3339)))
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
		pause = min(pause*2, 2*time.Second)
	}
}
