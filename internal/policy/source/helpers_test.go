package source_test

import "github.com/pml-sandbox/pml/internal/catalog"

func toolGet(readOnly bool) catalog.Tool {
	return catalog.Tool{Server: "pets", Name: "getPetById", Annotations: catalog.Annotations{ReadOnly: &readOnly}}
}
