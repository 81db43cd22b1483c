package openapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// cacheFormat names the entry layout and the conversion's rules: change it
// whenever either changes in a way a build's version does not show (a
// development build without version control information).
const cacheFormat = "pml-openapi-cache/1"

// entryMagic opens every entry.
var entryMagic = []byte("PMLOAPI1")

// Bounds of the cache directory.
const (
	// maxEntryBytes bounds an entry read back: a document's text and its
	// schemas can be no larger (Parse's bounds), and a larger file is
	// not read at all.
	maxEntryBytes = MaxDocumentBytes + MaxSchemaBytes + 1<<20
	// maxEntries is how many entries the directory keeps: the oldest go
	// when a new one is written.
	maxEntries = 32
	// staleTemp is the age past which a temporary file is a dead
	// writer's, and removed.
	staleTemp = 10 * time.Minute
)

// Why a document was not read from the cache (cache.get), for the log.
var (
	errCacheMiss     = errors.New("no entry")
	errCacheUnsafe   = errors.New("the cache directory is writable by others")
	errCacheMismatch = errors.New("the entry is of another document, configuration or build")
	errNotDir        = errors.New("not a directory")
)

// castagnoli is CRC-32C, which amd64 and arm64 compute in hardware: an
// entry's checksum catches a torn or damaged file at a fraction of a
// millisecond. It is no defence against someone who can write the
// directory (they could write a correct checksum): that is what
// decodeDocument's bounds and checkDecoded are for.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// cache keeps documents as Parse made them, so that a process whose
// configuration names a document it has seen reads its tools back instead
// of parsing it again: GitHub's REST document takes seconds of CPU and
// hundreds of megabytes to parse, and tens of milliseconds to read back.
// An entry is keyed by the SHA-256 digest of the document's bytes, where
// it was read from, the configured base URL and the build (cacheKey), and
// is never trusted: see get.
type cache struct {
	dir string
	// build is what else the outcome of Parse depends on: the entry
	// format, the module's version and its dependencies'.
	build string
	// racy is how recently a file may have changed for its fingerprint
	// not to be recorded (racyWindow; tests shorten it).
	racy time.Duration
	// shipped, when set, is a directory of entries read after dir's and
	// never written: a Lambda artifact's, pre-warmed by its build.
	shipped string
}

// newCache is the cache in dir, with the read-only entries of shipped;
// nil when dir is "" (no cache at all: what --no-cache asks for).
func newCache(dir, shipped string) *cache {
	if dir == "" {
		return nil
	}
	return &cache{dir: dir, build: buildKey(), racy: racyWindow, shipped: shipped}
}

// CacheDir is where the documents' cache lives for a compiled-guest cache
// in guestDir: beside it, never inside, so that the guest cache's own
// accounting (internal/guestcache counts its files) never sees these. ""
// (no cache) for "".
func CacheDir(guestDir string) string {
	if guestDir == "" {
		return ""
	}
	return filepath.Clean(guestDir) + "-openapi"
}

// buildKey is what makes one build's conversion another's: the entry
// format, the Go version, the main module's version and revision and
// every dependency's version; for a build without a revision, or from a
// modified tree, the executable's size and time too, so that rebuilding
// changed code never reads an entry the old code wrote.
func buildKey() string {
	var b strings.Builder
	b.WriteString(cacheFormat)
	bi, ok := debug.ReadBuildInfo()
	dev := !ok
	if ok {
		fmt.Fprintf(&b, "\n%s %s %s", bi.GoVersion, bi.Main.Path, bi.Main.Version)
		revision := ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				dev = dev || s.Value == "true"
			}
		}
		dev = dev || revision == ""
		fmt.Fprintf(&b, " %s", revision)
		for _, d := range bi.Deps {
			if !conversionDep(d.Path) {
				continue
			}
			fmt.Fprintf(&b, "\n%s %s", d.Path, d.Version)
			if d.Replace != nil {
				fmt.Fprintf(&b, " => %s %s", d.Replace.Path, d.Replace.Version)
			}
		}
	}
	if dev {
		if exe, err := os.Executable(); err == nil {
			if fi, err := os.Stat(exe); err == nil {
				fmt.Fprintf(&b, "\nexe %d %d", fi.Size(), fi.ModTime().UnixNano())
			}
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// conversionDeps are the module path prefixes of the libraries Parse's
// outcome depends on: kin-openapi and what it reads JSON and YAML with,
// the JSON Schema compiler (a schema it refuses drops its operation),
// yaml.v3. Only they are in the build key, so that every binary of one
// release (pml, the Lambda functions: each links other libraries) reads
// the entries another wrote.
var conversionDeps = []string{"github.com/getkin/", "github.com/go-openapi/", "github.com/oasdiff/", "github.com/perimeterx/",
	"github.com/mohae/", "github.com/woodsbury/", "github.com/santhosh-tekuri/", "gopkg.in/yaml.", "golang.org/x/text"}

func conversionDep(path string) bool {
	return slices.ContainsFunc(conversionDeps, func(p string) bool { return strings.HasPrefix(path, p) })
}

// inputs is what an entry is the outcome of.
type inputs struct {
	digest [sha256.Size]byte
	// docURL is where the document came from as far as Parse can tell
	// (keyLocation).
	docURL string
	base   string
}

func inputsOf(data []byte, docURL *url.URL, base string) inputs {
	return inputs{digest: sha256.Sum256(data), docURL: keyLocation(docURL), base: base}
}

// keyLocation is the part of a document's location that Parse's outcome
// depends on: a URL's whole (relative servers resolve against it, and
// the servers must be on its host), but of a file only that it is one (a
// file's relative servers are refused wherever it is). So an entry made
// from a copy of the document elsewhere (a build's staging directory)
// serves the file the deployment names.
func keyLocation(u *url.URL) string {
	if u != nil && u.Scheme == "file" {
		return "file:"
	}
	return urlString(u)
}

// fingerprint identifies a version of a file by what stat says of it.
type fingerprint struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

// statMagic opens a stat record.
var statMagic = []byte("PMLOSTA1")

// racyWindow is how recently a file may have changed for its fingerprint
// not to be recorded: the kernel stamps times from a coarse clock, so a
// file written twice within a tick can keep its times; a record is only
// written once the file has been still for longer than any tick.
const racyWindow = 2 * time.Second

// statName is the file name of the stat record of the document file at
// path.
func (c *cache) statName(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	h := sha256.New()
	for _, s := range []string{"stat", c.build, path} {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:20]) + ".stat"
}

// fileDigest is the SHA-256 digest of the document file at path: read
// back from its stat record when the file's fingerprint is the one
// recorded (hashing GitHub's 13 MB document is a third of a cached
// start's cost), else taken by reading the file, and recorded for the
// next process when the file was still throughout and is not racy. The
// record is as untrusted as an entry: at worst it names the digest of an
// earlier version of the same file, whose entry still passes every check
// of get against this configuration.
func (c *cache) fileDigest(path string) ([sha256.Size]byte, error) {
	var none [sha256.Size]byte
	fi, err := os.Stat(path)
	if err != nil {
		return none, err
	}
	if fi.Size() > MaxDocumentBytes {
		// Refused as Fetch would, whatever a record says.
		return none, ErrTooLarge
	}
	fp, ok := fingerprintOf(fi)
	record := filepath.Join(c.dir, c.statName(path))
	if ok {
		if d, found := c.readStat(record, fp); found {
			return d, nil
		}
	}
	digest, err := digestFile(path)
	if err != nil || !ok || time.Since(time.Unix(0, fp.ctime)) < c.racy {
		return digest, err
	}
	if after, err := os.Stat(path); err == nil {
		if fp2, ok := fingerprintOf(after); ok && fp2 == fp {
			_ = c.writeStat(record, fp, digest)
		}
	}
	return digest, nil
}

// readStat is the digest a stat record holds for fp; false when the
// record is absent, damaged or of another fingerprint.
func (c *cache) readStat(path string, fp fingerprint) ([sha256.Size]byte, bool) {
	var d [sha256.Size]byte
	if safeDir(c.dir) != nil {
		return d, false
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) != len(statMagic)+5*8+sha256.Size+crc32.Size || !bytes.Equal(b[:len(statMagic)], statMagic) {
		return d, false
	}
	body, sum := b[:len(b)-crc32.Size], b[len(b)-crc32.Size:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return d, false
	}
	if !bytes.Equal(body[len(statMagic):len(statMagic)+5*8], fp.bytes()) {
		return d, false
	}
	copy(d[:], body[len(statMagic)+5*8:])
	return d, true
}

// writeStat records digest as the digest of the file of fingerprint fp.
func (c *cache) writeStat(path string, fp fingerprint, digest [sha256.Size]byte) error {
	b := append(bytes.Clone(statMagic), fp.bytes()...)
	b = append(b, digest[:]...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return c.writeFile(path, b)
}

func (fp fingerprint) bytes() []byte {
	b := make([]byte, 0, 5*8)
	for _, v := range []uint64{fp.dev, fp.ino, uint64(fp.size), uint64(fp.mtime), uint64(fp.ctime)} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// digestFile is the SHA-256 digest of the file at path, read in pieces;
// a file over MaxDocumentBytes is an error, as Fetch would refuse it.
func digestFile(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.LimitReader(f, MaxDocumentBytes+1), make([]byte, 256<<10))
	switch {
	case err != nil:
		return sum, err
	case n > MaxDocumentBytes:
		return sum, ErrTooLarge
	}
	h.Sum(sum[:0])
	return sum, nil
}

// name is the entry's file name: a digest of everything it is keyed by.
func (c *cache) name(in inputs) string {
	h := sha256.New()
	for _, s := range []string{c.build, string(in.digest[:]), in.docURL, in.base} {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:20]) + ".doc"
}

// safeDir reports whether the directory may be used: it is a directory,
// not a link, and no one but its owner may write it (a directory others
// can write is one whose entries anyone could have put there).
func safeDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %w", dir, errNotDir)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 {
		return errCacheUnsafe
	}
	return nil
}

// get reads back the document of in, checked: the file within
// maxEntryBytes, its checksum, magic and the inputs it records equal to
// in's, its body decoded within the document bounds (decodeDocument), its
// hosts held to the configuration (checkDecoded). Any failure is an error
// and the caller parses the document instead.
//
// The shipped directory, when there is one, is looked in after the
// cache's own: read only, it is what a build put beside the binary.
func (c *cache) get(in inputs, docURL *url.URL) (*Document, error) {
	doc, err := c.getFrom(c.dir, in, docURL)
	if err == nil || c.shipped == "" {
		return doc, err
	}
	shipped, serr := c.getFrom(c.shipped, in, docURL)
	switch {
	case serr == nil:
		return shipped, nil
	case errors.Is(err, errCacheMiss):
		return nil, serr
	}
	return nil, err
}

func (c *cache) getFrom(dir string, in inputs, docURL *url.URL) (*Document, error) {
	if err := safeDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) {
			// Nothing there: a directory not made yet, or a file in its
			// place (where no cache can be written, as a miss).
			return nil, errCacheMiss
		}
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, c.name(in)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errCacheMiss
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxEntryBytes {
		return nil, fmt.Errorf("%w: not a regular file within %d bytes", errBadEntry, maxEntryBytes)
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadEntry, err)
	}
	return c.decodeEntry(data, in, docURL)
}

// decodeEntry is the document of an entry's bytes, checked (see get).
func (c *cache) decodeEntry(data []byte, in inputs, docURL *url.URL) (*Document, error) {
	body, err := c.open(data, in)
	if err != nil {
		return nil, err
	}
	doc, err := decodeDocument(body)
	if err != nil {
		return nil, err
	}
	if err := checkDecoded(doc, docURL, in.base); err != nil {
		return nil, err
	}
	return doc, nil
}

// open checks an entry's frame and returns its body.
func (c *cache) open(data []byte, in inputs) ([]byte, error) {
	if len(data) < len(entryMagic)+crc32.Size || !bytes.Equal(data[:len(entryMagic)], entryMagic) {
		return nil, fmt.Errorf("%w: not an entry", errBadEntry)
	}
	payload, sum := data[:len(data)-crc32.Size], data[len(data)-crc32.Size:]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadEntry)
	}
	d := &decoder{b: payload[len(entryMagic):]}
	build, digest, docURL, base := d.string(), d.bytes(), d.string(), d.string()
	body := d.bytes()
	switch {
	case d.err != nil:
		return nil, d.err
	case len(d.b) != 0:
		return nil, fmt.Errorf("%w: bytes after the body", errBadEntry)
	case build != c.build || !bytes.Equal(digest, in.digest[:]) || docURL != in.docURL || base != in.base:
		return nil, errCacheMismatch
	}
	return body, nil
}

// put writes the entry of in: to a temporary file in the directory, then
// renamed over the entry's name, so that a reader, and a process writing
// the same entry at the same time, only ever sees a whole entry.
func (c *cache) put(in inputs, doc *Document) error {
	e := &encoder{b: append([]byte(nil), entryMagic...)}
	e.string(c.build)
	e.bytes(in.digest[:])
	e.string(in.docURL)
	e.string(in.base)
	e.bytes(encodeDocument(nil, doc))
	e.b = binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b, castagnoli))
	if err := c.writeFile(filepath.Join(c.dir, c.name(in)), e.b); err != nil {
		return err
	}
	c.prune()
	return nil
}

// writeFile writes data to path in the (safe) directory: to a temporary
// file, then renamed into place.
func (c *cache) writeFile(path string, data []byte) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	if err := safeDir(c.dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// prune removes dead writers' temporary files and all but the newest
// maxEntries entries and stat records. Errors are ignored: another process may be pruning
// too.
func (c *cache) prune() {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	type entry struct {
		name string
		mod  time.Time
	}
	groups := map[string][]entry{}
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		switch name := de.Name(); {
		case strings.HasPrefix(name, ".tmp-"):
			if time.Since(fi.ModTime()) > staleTemp {
				_ = os.Remove(filepath.Join(c.dir, name))
			}
		case strings.HasSuffix(name, ".doc"), strings.HasSuffix(name, ".stat"):
			ext := filepath.Ext(name)
			groups[ext] = append(groups[ext], entry{name, fi.ModTime()})
		}
	}
	for _, entries := range groups {
		if len(entries) <= maxEntries {
			continue
		}
		slices.SortFunc(entries, func(a, b entry) int { return b.mod.Compare(a.mod) })
		for _, e := range entries[maxEntries:] {
			_ = os.Remove(filepath.Join(c.dir, e.name))
		}
	}
}
