package merge

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

func jsonl(t *testing.T, recs ...record.Record) string {
	t.Helper()
	var b bytes.Buffer
	w := record.NewWriter(&b)
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func shardRecs(i, n int) []record.Record {
	var out []record.Record
	for j := range n {
		out = append(out, decodingRec(fmt.Sprintf("s%d/C=0 N=4#%d", i, j), window, window+time.Second, window+2*time.Second))
	}
	return out
}

func TestRecordsConcatenate(t *testing.T) {
	m, _, err := Runs(inputs(full(0, 2, 4), full(1, 2, 4)))
	if err != nil {
		t.Fatal(err)
	}
	a, b := jsonl(t, shardRecs(0, 3)...), jsonl(t, shardRecs(1, 2)...)
	var out bytes.Buffer
	n, err := Records(&out, m, []RecordFile{{"a.jsonl", strings.NewReader(a)}, {"b.jsonl", strings.NewReader(b)}})
	if err != nil || n != 5 {
		t.Fatalf("Records: %d, %v", n, err)
	}
	if out.String() != a+b {
		t.Error("the merged records are not the shards' lines, concatenated")
	}
	// The record tools read it.
	recs, err := record.ReadAll(&out)
	if err != nil || len(recs) != 5 {
		t.Fatalf("reading the merged records: %d, %v", len(recs), err)
	}

	other := shardRecs(1, 1)
	other[0].Wall = start.Add(-time.Hour)
	noShard := shardRecs(0, 1)
	noShard[0].ID = "C=0 N=4#1"
	for _, tc := range []struct {
		name  string
		files []RecordFile
		words string
	}{
		{"twice", []RecordFile{{"a.jsonl", strings.NewReader(a)}, {"a2.jsonl", strings.NewReader(a)}}, "both hold shard 0"},
		{"id twice", []RecordFile{{"a.jsonl", strings.NewReader(a + jsonl(t, shardRecs(0, 1)...))}}, "appears twice"},
		{"two shards in a file", []RecordFile{{"ab.jsonl", strings.NewReader(a + b)}}, "in a file of shard 0"},
		{"not a shard's", []RecordFile{{"x.jsonl", strings.NewReader(jsonl(t, noShard...))}}, "not a shard's"},
		{"shard out of range", []RecordFile{{"x.jsonl", strings.NewReader(jsonl(t, shardRecs(5, 1)...))}}, "has 2 shards"},
		{"another run", []RecordFile{{"x.jsonl", strings.NewReader(jsonl(t, other...))}}, "outside run r1"},
		{"not a record", []RecordFile{{"x.jsonl", strings.NewReader("{\"schema\": 1\n")}}, "x.jsonl:1: not a record"},
	} {
		if _, err := Records(&bytes.Buffer{}, m, tc.files); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v; want a refusal saying %q", tc.name, err, tc.words)
		}
	}
	if _, err := Records(&bytes.Buffer{}, &result.Result{}, nil); err == nil {
		t.Error("records of a run that is not sharded were merged")
	}
}
