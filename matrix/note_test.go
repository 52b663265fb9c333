package matrix

import (
	"slices"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestNote: a run's notes come in through note, in order, each once.
func TestNote(t *testing.T) {
	for _, tt := range []struct {
		name  string
		calls [][]string
		want  []string
	}{
		{"none", nil, nil},
		{"in order", [][]string{{"a", "b"}, {"c"}}, []string{"a", "b", "c"}},
		{"said twice, kept once", [][]string{{"Context 8K: truncated"}, {"x", "Context 8K: truncated"}}, []string{"Context 8K: truncated", "x"}},
		{"twice in one call", [][]string{{"a", "a"}}, []string{"a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &runner{res: &result.Result{}}
			for _, c := range tt.calls {
				r.note(c...)
			}
			if !slices.Equal(r.res.Notes, tt.want) {
				t.Errorf("notes %q, want %q", r.res.Notes, tt.want)
			}
		})
	}
}
