package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReportBoardEnvKeepsOneRun: TOKENTAP_REPORT_SORT (or _SLO), set for
// boards in a shell or CI, turned every single-run report and every
// two-run comparison into a leaderboard (and refused a proxy capture with
// exit 2). Only the flags given on the command line ask for a board; the
// variables are the board's defaults.
func TestReportBoardEnvKeepsOneRun(t *testing.T) {
	for _, tt := range []struct {
		name, env, value string
		args             []string
		want             string
	}{
		{"one run, sort from env", "TOKENTAP_REPORT_SORT", "ttft", []string{seedDoc}, "Agents-A1-4B-FP8 on RTX 3060 12GB\n"},
		{"one run, slo from env", "TOKENTAP_REPORT_SLO", "ttft=1s", []string{seedDoc}, "Agents-A1-4B-FP8 on RTX 3060 12GB\n"},
		{"two runs, sort from env", "TOKENTAP_REPORT_SORT", "ttft", []string{seedDoc, "../../report/testdata/seed-003.json"}, "A = seed-002.json"},
		{"three runs, sort from env", "TOKENTAP_REPORT_SORT", "ttft", []string{seedDoc, "../../report/testdata/seed-000.json", "../../report/testdata/seed-003.json"}, "1  seed-000.json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			var so, se bytes.Buffer
			if code := run(append([]string{"report"}, tt.args...), &so, &se); code != 0 {
				t.Fatalf("exit %d; stderr %q", code, se.String())
			}
			if !strings.Contains(so.String(), tt.want) {
				t.Errorf("%s=%s: stdout lacks %q:\n%.300s", tt.env, tt.value, tt.want, so.String())
			}
		})
	}
}
