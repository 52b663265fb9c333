package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
)

func TestParseFakeEngine(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, s fakeEngineSetup)
		code  int // when done
		msg   string
	}{
		{name: "defaults are DefaultModel, answering another model name with 404 as vLLM", check: func(t *testing.T, s fakeEngineSetup) {
			m := fixtures.DefaultModel()
			if s.model != m || s.cfg.Listen != "127.0.0.1:8000" || s.cfg.Ledger || len(s.faults) != 0 {
				t.Fatalf("setup %+v, want DefaultModel %+v", s, m)
			}
		}},
		{name: "env sets the model", env: map[string]string{"TOKENTAP_FAKE_MODEL": "envm", "TOKENTAP_FAKE_TBT_BASE": "7ms", "TOKENTAP_FAKE_FAULT": "cut=3;status=500,min-prompt=9", "TOKENTAP_FAKE_LEDGER": "true"},
			check: func(t *testing.T, s fakeEngineSetup) {
				if s.model.Name != "envm" || s.model.TBTBase != 7*time.Millisecond || !s.cfg.Ledger || len(s.faults) != 2 || s.faults[1].MinPromptToks != 9 {
					t.Fatalf("setup %+v", s)
				}
			}},
		{name: "flags win over env", env: map[string]string{"TOKENTAP_FAKE_TBT_BASE": "7ms", "TOKENTAP_FAKE_MAX_RUNNING": "3"},
			args: []string{"--tbt-base", "2ms", "--kv-capacity", "1024", "--block-size", "32", "--tokens-per-event", "4", "--finish-chunk", "--fault", "cut=1", "--fault", "malformed@2"},
			check: func(t *testing.T, s fakeEngineSetup) {
				m := s.model
				if m.TBTBase != 2*time.Millisecond || m.MaxRunning != 3 || m.KVCapacity != 1024 || m.BlockSize != 32 || m.TokensPerEvent != 4 || !m.FinishChunk || len(s.faults) != 2 {
					t.Fatalf("model %+v faults %+v", m, s.faults)
				}
			}},
		{name: "vllm: strict model names", args: []string{"--flavor", "vllm"}, env: nil, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != false {
				t.Fatalf("model %+v: AnyModel %v, want false", s.model, s.model.AnyModel)
			}
		}},
		{name: "vllm: any model name when asked", args: []string{"--strict-model=false"}, env: nil, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != true {
				t.Fatalf("model %+v: AnyModel %v, want true", s.model, s.model.AnyModel)
			}
		}},
		{name: "vllm: any model name when the variable asks", args: nil, env: map[string]string{"TOKENTAP_FAKE_STRICT_MODEL": "false"}, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != true {
				t.Fatalf("model %+v: AnyModel %v, want true", s.model, s.model.AnyModel)
			}
		}},
		{name: "ollama: strict model names", args: []string{"--flavor", "ollama"}, env: nil, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != false {
				t.Fatalf("model %+v: AnyModel %v, want false", s.model, s.model.AnyModel)
			}
		}},
		{name: "llama.cpp: any model name", args: []string{"--flavor", "llama.cpp"}, env: nil, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != true {
				t.Fatalf("model %+v: AnyModel %v, want true", s.model, s.model.AnyModel)
			}
		}},
		{name: "tgi: any model name", args: []string{"--flavor", "tgi"}, env: nil, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != true {
				t.Fatalf("model %+v: AnyModel %v, want true", s.model, s.model.AnyModel)
			}
		}},
		{name: "llama.cpp: strict model names when asked", args: []string{"--flavor", "llama.cpp", "--strict-model"}, env: nil, check: func(t *testing.T, s fakeEngineSetup) {
			if s.model.AnyModel != false {
				t.Fatalf("model %+v: AnyModel %v, want false", s.model, s.model.AnyModel)
			}
		}},
		{name: "bad fault", args: []string{"--fault", "explode=1"}, code: 2, msg: "--fault"},
		{name: "bare port", args: []string{"--listen", "8000"}, code: 2, msg: "--listen 8000: want host:port, e.g. 127.0.0.1:8000"},
		{name: "invalid model names the flag", args: []string{"--kv-capacity", "1000"}, code: 2, msg: "--kv-capacity 1000: must be > 0 and a multiple of --block-size 16"},
		// The flavours start with the real engines' defaults (they failed:
		// "the number of slots (Slots) 0 must be > 0").
		{name: "llama.cpp starts with llama-server's defaults", args: []string{"--flavor", "llama.cpp"}, check: func(t *testing.T, s fakeEngineSetup) {
			m := s.model
			if m.Slots != 4 || !m.LlamaCpp.UnifiedKV || m.SlotContext() != 65536 || m.Validate() != nil {
				t.Fatalf("model %+v (slot context %d)", m, m.SlotContext())
			}
		}},
		{name: "llama.cpp honours --max-model-len", args: []string{"--flavor", "llama.cpp", "--max-model-len", "16384"}, check: func(t *testing.T, s fakeEngineSetup) {
			if m := s.model; m.SlotContext() != 16384 || m.KVCapacity != 16384 {
				t.Fatalf("slot context %d, KV %d; want 16384 (/props n_ctx said 40960)", m.SlotContext(), m.KVCapacity)
			}
		}},
		{name: "llama.cpp slots of their own", args: []string{"--flavor", "llama.cpp", "--slots", "2", "--max-model-len", "8192"}, check: func(t *testing.T, s fakeEngineSetup) {
			if m := s.model; m.LlamaCpp.UnifiedKV || m.SlotContext() != 8192 || m.KVCapacity != 16384 {
				t.Fatalf("model %+v", m)
			}
		}},
		{name: "llama.cpp --kv-capacity alone sets the slot context", args: []string{"--flavor", "llama.cpp", "--slots", "2", "--kv-capacity", "8192"}, check: func(t *testing.T, s fakeEngineSetup) {
			if m := s.model; m.SlotContext() != 4096 {
				t.Fatalf("slot context %d", m.SlotContext())
			}
		}},
		{name: "llama.cpp lengths that disagree", args: []string{"--flavor", "llama.cpp", "--max-model-len", "8192", "--kv-capacity", "81920"}, code: 2, msg: "--max-model-len 8192 and --kv-capacity 81920 disagree"},
		{name: "ollama starts with one slot", args: []string{"--flavor", "ollama"}, check: func(t *testing.T, s fakeEngineSetup) {
			if m := s.model; m.Slots != 1 || m.Validate() != nil {
				t.Fatalf("model %+v", m)
			}
		}},
		{name: "slots named by flag", args: []string{"--flavor", "ollama", "--slots", "0"}, code: 2, msg: "--slots 0: ollama needs at least one slot"},
		{name: "unknown flavour named by flag", args: []string{"--flavor", "trtllm"}, code: 2, msg: `"trtllm": use vllm, llama.cpp, ollama, tgi or sglang`},
		{name: "bad env", env: map[string]string{"TOKENTAP_FAKE_TBT_BASE": "soon"}, code: 2, msg: "TOKENTAP_FAKE_TBT_BASE"},
		{name: "stray argument", args: []string{"extra"}, code: 2, msg: "unexpected arguments"},
		{name: "help", args: []string{"--help"}, code: 0, msg: "--tbt-per-ktokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var errb bytes.Buffer
			s, code, done := parseFakeEngine(tt.args, &errb, &errb)
			if tt.check != nil {
				if done {
					t.Fatalf("exited with %d: %s", code, errb.String())
				}
				tt.check(t, s)
				return
			}
			msg := tt.msg
			if code == 0 {
				msg = strings.ReplaceAll(msg, "--", "-") // help lists flags with one dash
			}
			if !done || code != tt.code || !strings.Contains(errb.String(), msg) {
				t.Fatalf("done %v code %d stderr %q; want code %d mentioning %q", done, code, errb.String(), tt.code, msg)
			}
		})
	}
}
