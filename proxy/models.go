package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The model label of /metrics and the models of /stats are the models the
// engine lists (GET /v1/models), plus otherModel for any name it does not
// list: the name comes from clients, and a client inventing names must not
// grow the number of time series. Until the list is known (WatchModels
// not called, or the engine would not list) the first maxModels names are
// kept as sent.

// otherModel labels requests for a model the engine does not list.
const otherModel = "other"

// modelNames is the engine's model list.
type modelNames struct {
	mu     sync.RWMutex
	ids    []string
	known  bool
	missed chan struct{} // a name the list lacks was seen: list again soon
}

func newModelNames() *modelNames { return &modelNames{missed: make(chan struct{}, 1)} }

// set replaces the list.
func (n *modelNames) set(ids []string) {
	n.mu.Lock()
	n.ids, n.known = ids, true
	n.mu.Unlock()
}

// label is the label a request for model name is counted under: the
// listed id (name, or name:latest for a name without a tag, as Ollama
// answers to both), otherModel for a name the engine does not list, or the
// name itself while no list is known (ok false).
func (n *modelNames) label(name string) (label string, ok bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.known {
		return name, false
	}
	for _, id := range n.ids {
		if id == name {
			return id, true
		}
	}
	if !strings.Contains(name, ":") {
		for _, id := range n.ids {
			if id == name+":latest" {
				return id, true
			}
		}
	}
	select {
	case n.missed <- struct{}{}: // maybe the engine loaded it since
	default:
	}
	return otherModel, true
}

// ListError is the engine answering GET /v1/models with an error status
// (401 where it wants a key the proxy does not have): it answers, but did
// not list its models.
type ListError struct{ Status int }

func (e *ListError) Error() string { return fmt.Sprintf("GET /v1/models answered HTTP %d", e.Status) }

// ListModels asks the engine which models it serves (GET /v1/models on
// the upstream, without any client's credentials).
func (p *Proxy) ListModels(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(p.cfg.Upstream, "/")+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.lister.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap() // the URL is in the message already
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &ListError{Status: resp.StatusCode}
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET /v1/models did not answer with a model list: %w", err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
}

// WatchModels lists the engine's models now, limits the model label to
// them from then on, and lists them again every `every` and soon after a
// request names a model the list lacks (at most every 10 s), until ctx
// ends. It returns the first list, or why there is none: the proxy then
// keeps labelling by the names clients send (at most 100) until a listing
// succeeds.
func (p *Proxy) WatchModels(ctx context.Context, every time.Duration) ([]string, error) {
	ids, err := p.ListModels(ctx)
	if err == nil {
		p.m.names.set(ids)
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		var last time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-p.m.names.missed:
				if wait := 10*time.Second - time.Since(last); wait > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(wait):
					}
				}
			}
			last = time.Now()
			if ids, err := p.ListModels(ctx); err == nil {
				p.m.names.set(ids)
			}
		}
	}()
	return ids, err
}

// Open is the number of requests the proxy is serving now.
func (p *Proxy) Open() int64 { return p.active.Load() }
