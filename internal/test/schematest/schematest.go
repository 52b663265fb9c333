// Package schematest holds result documents to result/schema.json (and
// other documents to their schemas, ValidateAgainst) in
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

var (
	otherMu       sync.Mutex
	otherCompiled = map[string]*jsonschema.Schema{}
)

// ValidateAgainst checks an encoded document against another of
// tokentap's schemas (report/board.schema.json, say), given as its bytes;
// each is compiled once.
func ValidateAgainst(schema, doc []byte) error {
	otherMu.Lock()
	s, ok := otherCompiled[string(schema)]
	if !ok {
		d, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
		if err != nil {
			otherMu.Unlock()
			return fmt.Errorf("the schema is not JSON: %w", err)
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if err := c.AddResource("other.schema.json", d); err != nil {
			otherMu.Unlock()
			return err
		}
		if s, err = c.Compile("other.schema.json"); err != nil {
			otherMu.Unlock()
			return fmt.Errorf("not a valid JSON Schema: %w", err)
		}
		otherCompiled[string(schema)] = s
	}
	otherMu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}
