// Package atinit turns the garbage collector off while the packages are
// initialised, for a main that imports it (blank) and calls
// startgc.Begin first thing: that start then reaches back into package
// initialisation, where the linked libraries allocate several megabytes
// of what they keep (the JSON Schema meta-schemas, the SDKs' schemas) and
// Go's 4 MiB first heap goal would otherwise run the collector over it.
//
// Go initialises, again and again, the first package in import-path order
// whose imports are all initialised. This one needs only startgc and a few
// standard packages, so it is ready early and runs before the packages
// that sort after it and wait on more (santhosh-tekuri/jsonschema,
// golang.org/x, google.golang.org, go.opentelemetry.io, most of the
// project's own); what is ready before it and sorts before it (much of
// the AWS SDK) runs first. cmd/pml's TestInitWithoutCollector checks the
// order that matters from the init trace.
package atinit

import "github.com/pml-sandbox/pml/internal/startgc"

func init() { startgc.Hold() }
