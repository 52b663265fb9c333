package httpchunk

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1a\r\n", 26, true},
		{"FF\n", 255, true},
		{"10;name=value\r\n", 16, true},
		{"10 \t;ext\r\n", 16, true},
		{"7fffffffffffffff", 0, false}, // 16 digits: past what 15 hold safely
		{"fffffffffffffff", 1<<60 - 1, true},
		{"", 0, false},
		{"\r\n", 0, false},
		{"5\r\r\n", 0, false}, // one line ending, not several
		{"5\n\n", 0, false},
		{";ext", 0, false},
		{"-1", 0, false},
		{"0x10", 0, false},
		{"1 0", 0, false},
		{"g", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseSize([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	f.Add([]byte("1a;x=y\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if n, ok := ParseSize(in); ok && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", in, n)
		}
	})
}
