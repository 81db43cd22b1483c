package suspend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"

	"github.com/pml-sandbox/pml/internal/guest"
)

// A suspension is stored as one binary blob:
//
//	"PMLSUSP1"                  magic and format version
//	uvarint n                   length of the next part
//	n bytes                     S2(JSON of the suspension without Memory)
//	the rest                    Memory, as the engine made it (S2 already)
//
// Memory stays binary (in JSON it would be base64, a third bigger), and the
// rest is compressed because logs, call records and the tool table's
// schemas can be large and compress well. The blob goes to its own file or
// DynamoDB chunk items, never into the metadata, whose size must stay
// bounded.
var blobMagic = []byte("PMLSUSP1")

// EncodeSuspension returns s's blob, as the stores keep it (a run's
// checkpoint holds one too).
func EncodeSuspension(s *guest.Suspension) ([]byte, error) {
	rest := *s
	rest.Memory = nil
	js, err := json.Marshal(&rest)
	if err != nil {
		return nil, fmt.Errorf("encoding the suspension: %w", err)
	}
	head := s2.Encode(nil, js)
	out := make([]byte, 0, len(blobMagic)+binary.MaxVarintLen64+len(head)+len(s.Memory))
	out = append(out, blobMagic...)
	out = binary.AppendUvarint(out, uint64(len(head)))
	out = append(out, head...)
	return append(out, s.Memory...), nil
}

var errBadBlob = errors.New("not a stored suspension")

// DecodeSuspension parses a blob EncodeSuspension made; the returned
// Memory aliases b.
func DecodeSuspension(b []byte) (*guest.Suspension, error) {
	if !bytes.HasPrefix(b, blobMagic) {
		return nil, errBadBlob
	}
	b = b[len(blobMagic):]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, errBadBlob
	}
	js, err := s2.Decode(nil, b[k:k+int(n)])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadBlob, err)
	}
	var s guest.Suspension
	if err := json.Unmarshal(js, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadBlob, err)
	}
	s.Memory = b[k+int(n):]
	return &s, nil
}
