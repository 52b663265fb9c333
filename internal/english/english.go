// Package english writes the small pieces of English that tokentap's
// messages and reports are made of: "a, b and c", "1 cell", "3 cells".
package english

import (
	"strconv"
	"strings"
)

// List joins items as "a", "a and b", "a, b and c"; no items is "".
func List(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// Count is "1 cell" or "3 cells": n with the noun's singular or plural.
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
