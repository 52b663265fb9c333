// Package nginxref writes the nginx configuration tokentap's benchmarks
// hold its proxy against: a streaming reverse proxy in front of one
// engine (proxy_buffering off, HTTP/1.1 upstream keep-alive), its files
// under one directory, in the foreground. For benchmarks only.
package nginxref

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Config is one nginx in front of Upstream, listening on Listen.
type Config struct {
	Dir       string // pid, logs, temporary files and nginx.conf go here
	Upstream  string // host:port of the engine
	Listen    string // host:port nginx listens on
	Workers   int    // worker processes; 0: one per CPU ("auto")
	Keepalive int    // idle upstream connections kept per worker
}

// Write writes Dir/nginx.conf and returns the arguments that start nginx
// with it (-p Dir -c Dir/nginx.conf -e Dir/error.log).
func (c Config) Write() ([]string, error) {
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // nginx run by root drops to nobody otherwise, who cannot write Dir
	}
	workers := "auto"
	if c.Workers > 0 {
		workers = fmt.Sprint(c.Workers)
	}
	conf := fmt.Sprintf(`%s
worker_processes %[5]s;
worker_rlimit_nofile 16384;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream engine { server %[3]s; keepalive %[6]d; }
  server {
    listen %[4]s;
    client_max_body_size 128m;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
`, user, c.Dir, c.Upstream, c.Listen, workers, c.Keepalive)
	path := filepath.Join(c.Dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{"-p", c.Dir, "-c", path, "-e", filepath.Join(c.Dir, "error.log")}, nil
}

// WaitUp polls url+"/v1/models" until nginx (started with c's arguments
// as process pid) answers, for at most timeout, and returns its master's
// and workers' pids (for their CPU time). The error quotes its error log.
func (c Config) WaitUp(url string, pid int, timeout time.Duration) ([]int, error) {
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/v1/models"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.Dir, "error.log"))
			return nil, fmt.Errorf("nginx did not come up on %s:\n%s", c.Listen, log)
		}
	}
	pids := []int{pid}
	if kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		for _, f := range strings.Fields(string(kids)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids, nil
}
