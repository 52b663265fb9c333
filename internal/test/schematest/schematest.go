// Package schematest holds result documents to result/schema.json in
// tests, wherever a test makes one (the matrix, the commands), so the
// schema cannot drift from what tokentap writes.
package schematest

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tokentap/tokentap/result"
)

var (
	once     sync.Once
	compiled *jsonschema.Schema
	errComp  error
)

// Schema compiles result.JSONSchema (draft 2020-12, formats asserted).
func Schema() (*jsonschema.Schema, error) {
	once.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(result.JSONSchema))
		if err != nil {
			errComp = fmt.Errorf("schema.json is not JSON: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if err := c.AddResource("schema.json", doc); err != nil {
			errComp = err
			return
		}
		compiled, errComp = c.Compile("schema.json")
	})
	return compiled, errComp
}

// Validate checks one encoded document against the schema.
func Validate(doc []byte) error {
	s, err := Schema()
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// Result encodes r as tokentap writes it and checks it.
func Result(r *result.Result) error {
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		return err
	}
	return Validate(buf.Bytes())
}
