package mcpclient

import "github.com/pml-sandbox/pml/internal/argcheck"

// ArgError is one reason the arguments failed the input schema; a list of
// them is the Details of an INVALID_ARGUMENTS error.
type ArgError = argcheck.Error
