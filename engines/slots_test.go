package engines

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Readings of llama-server (82bb48500, the live tier's tiny model, 2
// slots) scraped every 2 ms while it ran requests.
const (
	// slot 1 generating a warm prompt
	slotWarm = `{"id":1,"n_ctx":4096,"speculative":false,"is_processing":true,"id_task":59501,"n_prompt_tokens":1036,"n_prompt_tokens_processed":1,"n_prompt_tokens_cache":1022,"next_token":[{"has_next_token":true,"has_new_line":false,"n_remain":18,"n_decoded":14}]}`
	// slot 1 taken by the next request, its prompt not begun
	slotWarmLeft = `{"id":1,"n_ctx":4096,"speculative":false,"is_processing":true,"id_task":59552,"n_prompt_tokens":1054,"n_prompt_tokens_processed":1,"n_prompt_tokens_cache":0,"next_token":[{"has_next_token":false,"has_new_line":false,"n_remain":0,"n_decoded":32}]}`
	// slot 0 generating a nearly cold prompt (only the template's start cached)
	slotNearlyCold = `{"id":0,"n_ctx":4096,"speculative":false,"is_processing":true,"id_task":75488,"n_prompt_tokens":1232,"n_prompt_tokens_processed":1215,"n_prompt_tokens_cache":6,"next_token":[{"has_next_token":true,"has_new_line":false,"n_remain":52,"n_decoded":12}]}`
	// slot 0 taken by the next request, its prompt not begun
	slotNearlyColdLeft = `{"id":0,"n_ctx":4096,"speculative":false,"is_processing":true,"id_task":75702,"n_prompt_tokens":1284,"n_prompt_tokens_processed":1215,"n_prompt_tokens_cache":0,"next_token":[{"has_next_token":false,"has_new_line":false,"n_remain":0,"n_decoded":64}]}`
)

func TestParseSlotCaches(t *testing.T) {
	body := `[` + slotWarm + `,` + slotWarmLeft + `,
	{"id":2,"n_ctx":4096,"is_processing":false,"id_task":36,"n_prompt_tokens":9,"n_prompt_tokens_processed":0,"n_prompt_tokens_cache":0,"next_token":{"n_decoded":3}},
	{"id":3,"n_ctx":4096,"is_processing":true,"id_task":37,"n_prompt_tokens_processed":5,"n_prompt_tokens_cache":0},
	{"id":4,"n_ctx":4096,"is_processing":false}]`
	got, ok := parseSlotCaches([]byte(body))
	want := []SlotCache{
		{Slot: 1, Task: 59501, Busy: true, Held: 1036, Processed: 1, Cached: 1022, Decoded: 14},
		{Slot: 1, Task: 59552, Busy: true, Held: 1054, Processed: 1, Cached: 0, Decoded: 32},
		{Slot: 2, Task: 36, Held: 9, Decoded: 3},
		{Slot: 3, Task: 37, Busy: true, Held: -1, Processed: 5},
	}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("%+v %v,\nwant %+v", got, ok, want)
	}
	sample, err := os.ReadFile("testdata/llamacpp/slots.json") // captured idle: nothing running
	if err != nil {
		t.Fatal(err)
	}
	var w SlotWatch
	if got, ok := parseSlotCaches(sample); !ok || len(w.Own(got)) != 0 {
		t.Errorf("captured idle /slots: %+v %v", got, ok)
	}
	if _, ok := parseSlotCaches([]byte(`[{"id":0}]`)); ok {
		t.Error("an array without is_processing taken for llama-server's /slots")
	}
}

func TestSlotWatch(t *testing.T) {
	read := func(slots ...string) []SlotCache {
		t.Helper()
		got, ok := parseSlotCaches([]byte("[" + strings.Join(slots, ",") + "]"))
		if !ok {
			t.Fatalf("not /slots: %v", slots)
		}
		return got
	}
	// Derived from llama-server's arithmetic, as the figures it shows of
	// a slot whose warm-up was a cold prompt (1,215 tokens computed, 64
	// generated), of the next request while its prompt waits, and of it
	// once its prompt began.
	idleCold := `{"id":0,"is_processing":false,"id_task":100,"n_prompt_tokens":1278,"n_prompt_tokens_processed":1215,"n_prompt_tokens_cache":0,"next_token":[{"n_decoded":64}]}`
	takenAfterCold := `{"id":0,"is_processing":true,"id_task":101,"n_prompt_tokens":1278,"n_prompt_tokens_processed":1215,"n_prompt_tokens_cache":0,"next_token":[{"n_decoded":64}]}`
	ownWarm := `{"id":0,"is_processing":true,"id_task":101,"n_prompt_tokens":1220,"n_prompt_tokens_processed":1,"n_prompt_tokens_cache":1214,"next_token":[{"n_decoded":6}]}`
	// Derived too: a cold prompt in prefill (next_token still the last
	// request's), then generating.
	coldPrefill := `{"id":1,"is_processing":true,"id_task":102,"n_prompt_tokens":512,"n_prompt_tokens_processed":512,"n_prompt_tokens_cache":0,"next_token":[{"n_decoded":32}]}`
	coldGen := `{"id":1,"is_processing":true,"id_task":102,"n_prompt_tokens":1232,"n_prompt_tokens_processed":1221,"n_prompt_tokens_cache":0,"next_token":[{"n_decoded":12}]}`
	tests := []struct {
		name  string
		seed  []string
		reads [][]string
		want  []int // the tasks of the readings taken as their own, in order
	}{
		{"a warm prompt generating", nil, [][]string{{slotWarm}}, []int{59501}},
		{"taken after a warm request: leftovers", nil, [][]string{{slotWarmLeft}}, nil},
		{"taken after a nearly cold request: leftovers", nil, [][]string{{slotNearlyCold}, {slotNearlyColdLeft}}, []int{75488}},
		{"taken after a cold warm-up read before the window: leftovers, then its own",
			[]string{idleCold}, [][]string{{takenAfterCold}, {takenAfterCold}, {ownWarm}}, []int{101}},
		{"taken after a cold warm-up never read: cannot tell, taken as cold",
			nil, [][]string{{takenAfterCold}}, []int{101}},
		{"a cold prompt, in prefill and generating", nil, [][]string{{coldPrefill}, {coldGen}}, []int{102, 102}},
		{"no n_prompt_tokens and nothing cached: cannot tell",
			nil, [][]string{{`{"id":3,"is_processing":true,"id_task":37,"n_prompt_tokens_processed":5,"n_prompt_tokens_cache":0}`}}, nil},
		{"idle slots are no request's own", nil, [][]string{{idleCold}}, nil},
	}
	for _, tt := range tests {
		var w SlotWatch
		if tt.seed != nil {
			w.Seed(read(tt.seed...))
		}
		var got []int
		for _, r := range tt.reads {
			for _, c := range w.Own(read(r...)) {
				got = append(got, c.Task)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: own %v, want %v", tt.name, got, tt.want)
		}
	}
}
