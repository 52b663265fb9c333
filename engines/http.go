package engines

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Errors a probe wraps, so callers can tell them apart with errors.Is.
var (
	// ErrUnreachable: nothing answered at the target (refused, no such host,
	// timeout, TLS failure).
	ErrUnreachable = errors.New("engine unreachable")
	// ErrUnauthorized: the target answered 401 or 403 (no key given, or
	// the key given was refused).
	ErrUnauthorized = errors.New("engine refused access")
	// ErrNotOpenAI: something answered, but not an OpenAI-compatible API
	// (an HTML page, another JSON API, 404 on /v1/models).
	ErrNotOpenAI = errors.New("not an OpenAI-compatible API")
	// ErrModel: the engine does not serve the model asked for, or says
	// of none that it serves it.
	ErrModel = errors.New("no such model")
)

// probeTimeout bounds each GET a probe sends; engines answer these from
// memory, so a slow answer means something is wrong.
const probeTimeout = 10 * time.Second

// maxProbeBody caps how much of a probe answer is read (a /metrics page of a
// busy multi-model engine is well under this).
const maxProbeBody = 8 << 20

// client sends the probes of one target. It never logs, and never puts the
// API key anywhere but the Authorization header.
type client struct {
	base   string // normalized, no trailing slash, no /v1
	shown  string // base with any userinfo redacted, for messages
	apiKey string
	hc     *http.Client
}

// response is one answered request.
type response struct {
	status int
	ctype  string
	body   []byte
}

func (r *response) ok() bool { return r.status >= 200 && r.status < 300 }

func (r *response) isHTML() bool {
	if strings.Contains(r.ctype, "text/html") {
		return true
	}
	b := bytes.TrimSpace(r.body)
	if len(b) > 64 {
		b = b[:64]
	}
	l := bytes.ToLower(b)
	return bytes.HasPrefix(l, []byte("<!doctype html")) || bytes.HasPrefix(l, []byte("<html"))
}

// excerpt is the start of the body, for error messages.
func (r *response) excerpt() string {
	s := strings.TrimSpace(string(r.body))
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// NormalizeBase turns what a user passes as an engine's URL (--target,
// --upstream) into its base URL: http:// added to a bare host:port,
// trailing slash and a trailing /v1 removed (people paste the OpenAI base
// URL). shown is base with any password redacted, for messages.
func NormalizeBase(raw string) (base, shown string, err error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", "", errors.New("no URL: give the engine's base URL, e.g. http://127.0.0.1:8000")
	}
	given := raw
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || strings.HasSuffix(u.Host, ":") {
		return "", "", fmt.Errorf("%q is not an http(s) URL of an engine: give one such as http://127.0.0.1:8000", given)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", "", fmt.Errorf("%q: port %s is not a port number (1 to 65535)", given, p)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.Path = strings.TrimSuffix(u.Path, "/v1")
	u.RawQuery, u.Fragment = "", ""
	base = strings.TrimRight(u.String(), "/")
	return base, strings.TrimRight(u.Redacted(), "/"), nil
}

func (c *client) do(ctx context.Context, method, path string, body any) (*response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.5")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.reachError(ctx, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s%s: reading the answer: %v", ErrUnreachable, method, c.shown, path, err)
	}
	return &response{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: b}, nil
}

// get sends a GET bounded by probeTimeout.
func (c *client) get(ctx context.Context, path string) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return c.do(ctx, http.MethodGet, path, nil)
}

// reachError turns a transport error into a message that says what to do.
// The URL in it never carries credentials.
func (c *client) reachError(ctx context.Context, err error) error {
	if ctx.Err() == context.Canceled {
		return ctx.Err()
	}
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: cannot reach %s: connection refused — is the engine running? check --target", ErrUnreachable, c.shown)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%w: cannot reach %s: no such host %q — check --target", ErrUnreachable, c.shown, dnsErr.Name)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: cannot reach %s: no answer in time — is the engine still starting, or is --target the wrong port?", ErrUnreachable, c.shown)
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: cannot reach %s: the connection was closed without an HTTP answer — is --target an HTTP server (http vs https)?", ErrUnreachable, c.shown)
	}
	// url.Error repeats the full URL; keep only the cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%w: cannot reach %s: %v — check --target", ErrUnreachable, c.shown, err)
}

// authError is the message for a 401/403 answer.
func (c *client) authError(path string, status int) error {
	if c.apiKey == "" {
		return fmt.Errorf("%w: %s answered %s with HTTP %d: it needs an API key, and none was given; give --api-key or set TOKENTAP_API_KEY (sent as Authorization: Bearer)", ErrUnauthorized, c.shown, path, status)
	}
	return fmt.Errorf("%w: %s answered %s with HTTP %d: the API key given was refused; check --api-key or TOKENTAP_API_KEY", ErrUnauthorized, c.shown, path, status)
}
