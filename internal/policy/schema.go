package policy

import (
	_ "embed"
	"sync"

	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

// schemaText is the Cedar schema every policy set is validated against.
//
//go:embed schema.cedarschema
var schemaText []byte

// Schema is the Cedar schema (Cedar's schema syntax) of the entities and
// actions a policy set is asked about: what `pml policy print --schema`
// shows, and what to load into Amazon Verified Permissions.
func Schema() []byte { return append([]byte(nil), schemaText...) }

// validator is the schema's strict validator, built once: the schema is
// part of the binary, so a schema that does not resolve is a bug caught
// by the first test.
//
// cedar-go's schema validation is in its experimental tree
// (x/exp/schema/validate, outside the module's semantic-version promise);
// go.mod pins the version it was read against.
var validator = sync.OnceValue(func() *validate.Validator {
	var s schema.Schema
	s.SetFilename("schema.cedarschema")
	if err := s.UnmarshalCedar(schemaText); err != nil {
		panic("policy: the shipped schema does not parse: " + err.Error())
	}
	r, err := s.Resolve()
	if err != nil {
		panic("policy: the shipped schema does not resolve: " + err.Error())
	}
	return validate.New(r, validate.WithStrict())
})
