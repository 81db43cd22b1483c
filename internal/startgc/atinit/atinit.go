// Package atinit turns the garbage collector off while the packages are
// initialised, for a main that imports it (blank) and calls
// startgc.Begin first thing: that start then reaches back into package
// initialisation, where the linked libraries allocate several megabytes
// of what they keep (the JSON Schema meta-schemas, the SDKs' schemas) and
// Go's 4 MiB first heap goal would otherwise run the collector over it.
//
// Go initialises packages in the order of their import paths, each once
// its imports are, so this one (imports: startgc and the standard
// library) runs before every package whose path sorts after
// github.com/pml-sandbox/pml/internal/startgc/atinit, the project's own
// and golang.org/x, google.golang.org, go.opentelemetry.io and
// santhosh-tekuri's among them; the AWS SDKs' packages sort before it.
package atinit

import "github.com/pml-sandbox/pml/internal/startgc"

func init() { startgc.Hold() }
