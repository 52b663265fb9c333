package main

import (
	"fmt"
	"strings"

	"github.com/tokentap/tokentap/slo"
)

// This file is --slo, shared by matrix, replay and proxy (METHOD.md §6).

// sloHelp is the --slo flag's help, shared by matrix, replay and proxy.
const sloHelp = "service-level objectives a request must all meet to count as good, e.g. ttft=500ms,tbt=50ms " +
	"(ttft; tbt: every gap between token events must meet it, so one slow gap misses it; tpot: the request's mean time per output token, " +
	"as vllm bench serve --goodput tpot: judges; e2e; target=90% for the capacity figure) [TOKENTAP_SLO]"

// parseSLO reads --slo for command cmd; an empty value is no objective.
func parseSLO(text string) (slo.Spec, error) {
	if strings.TrimSpace(text) == "" {
		return slo.Spec{}, nil
	}
	s, err := slo.Parse(text)
	if err != nil {
		return slo.Spec{}, fmt.Errorf("--slo: %w", err)
	}
	return s, nil
}
