//go:build !unix

package benchcpu

import "time"

// Now is 0 where getrusage is missing: Report then reports nothing.
func Now() time.Duration { return 0 }
