package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// testPKI is a CA made for one test and a certificate it signed for
// 127.0.0.1 and localhost.
type testPKI struct {
	pool  *x509.CertPool
	caPEM []byte
	leaf  tls.Certificate
}

func newTestPKI(t testing.TB) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tokentap test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return testPKI{
		pool:  pool,
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		leaf:  tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
	}
}

// TestHTTPSEngine checks an https engine whose certificate chains to a
// custom CA: trusted with UpstreamCAs, refused without (the system's roots
// do not know it; nothing turns verification off).
func TestHTTPSEngine(t *testing.T) {
	pki := newTestPKI(t)
	e := fixtures.New(fixtures.DefaultModel())
	srv := httptest.NewUnstartedServer(e.Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	body := chatBody(e.Model().Name, 12, true, "")

	h := startProxy(t, srv.URL, func(c *Config) { c.UpstreamCAs = pki.pool })
	resp, got, err := do(t, "POST", h.url+"/v1/chat/completions", body)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(got), "[DONE]") {
		t.Fatalf("with the CA: %v %v %s", resp, err, got)
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.OK || r.CompletionTokens != 12 {
		t.Fatalf("record %s, %d tokens", r.Outcome, r.CompletionTokens)
	}

	h = startProxy(t, srv.URL, nil)
	resp, got, err = do(t, "POST", h.url+"/v1/chat/completions", body)
	if err != nil || resp.StatusCode != 502 {
		t.Fatalf("without the CA: %v %v, want a 502", resp, err)
	}
	wantOpenAIError(t, got, 502, "certificate")
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.Connect || r.Blame != record.BlameEngine {
		t.Fatalf("record %s/%s", r.Outcome, r.Blame)
	}

	if _, err := New(Config{Upstream: "http://127.0.0.1:1", UpstreamCAs: pki.pool}); err == nil {
		t.Error("a CA for a plain-http upstream was accepted")
	}
}

// TestTLSListener serves clients over TLS: a stream passes whole and is
// measured, and a client that leaves during a long prefill is seen at once
// (its socket closes under TLS), so the engine's request is cancelled.
func TestTLSListener(t *testing.T) {
	pki := newTestPKI(t)
	e := fixtures.StartTest(t, fixtures.DefaultModel(), fixtures.WithLedger(true))
	h := startProxy(t, e.URL(), func(c *Config) { c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf}} })
	url := strings.Replace(h.url, "http://", "https://", 1)
	tc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}

	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(chatBody(e.Model().Name, 20, true, "")))
	resp, err := tc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(got), "[DONE]") {
		t.Fatalf("%d: %s", resp.StatusCode, got)
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.OK || r.Events() != 20 {
		t.Fatalf("record %s with %d events", r.Outcome, r.Events())
	}

	// A 30 s prefill; the client closes (close_notify, then FIN) after 200 ms.
	c, err := tls.Dial("tcp", strings.TrimPrefix(h.url, "http://"), &tls.Config{RootCAs: pki.pool})
	if err != nil {
		t.Fatal(err)
	}
	b := chatBody(e.Model().Name, 5, true, "")
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Fake-Fault: header-delay=30s\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
	time.Sleep(200 * time.Millisecond)
	left := time.Now()
	c.Close()
	r := h.waitRecords(t, 2)[1]
	if r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
		t.Fatalf("record %s/%s, want cancelled/client", r.Outcome, r.Blame)
	}
	// Seen at once, not when the prefill ends 30 s on: a bound far from
	// both, so a busy machine cannot fail it.
	if took := h.p.Clock().Start().Add(r.End).Sub(left); took > 10*time.Second {
		t.Fatalf("the client's leaving was seen %v after it closed", took)
	}
}
