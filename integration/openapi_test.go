package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/prism"
)

// petstoreConfig writes a server list naming the Swagger Petstore as
// published (@readme/oas-examples' copy of petstore.swagger.io's
// document), served by Prism at base: requests go to base_url, since the
// document's own server is petstore.swagger.io. Prism checks the
// document's security, so the credentials (an api_key header, an OAuth2
// bearer token) come from secret references.
func petstoreConfig(t *testing.T, doc, base string) string {
	t.Helper()
	cfg := fmt.Sprintf(`{"servers": [{"name": "petstore", "type": "openapi", "spec": %q, "base_url": %q,
	  "headers": {"api_key": "${env:PETSTORE_API_KEY}", "Authorization": "Bearer ${env:PETSTORE_TOKEN}"},
	  "allow_destructive": true}]}`, doc, base)
	path := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var petstoreSecrets = []string{"PETSTORE_API_KEY=special-key-4711", "PETSTORE_TOKEN=tok-0815-abcdef"}

// TestOpenAPIPetstore: a real OpenAPI service no one here wrote, from its
// published document, through `pml serve` and `pml run`: reads run,
// writes wait for approval, bad arguments never leave the host, the
// declarations type the responses, discovery and narrowing see its
// operations as tools, /healthz reports it.
func TestOpenAPIPetstore(t *testing.T) {
	doc := prism.Document(t, "3.0/json/petstore.json")
	api := prism.Start(t, doc)
	cfg := petstoreConfig(t, doc, api.URL)
	srv := startServe(t, petstoreSecrets, "--config", cfg)
	base := srv.base

	run := func(t *testing.T, body map[string]any) (int, durableDoc) {
		t.Helper()
		return postJSONAs(t, base+"/execute", "", body)
	}

	t.Run("a read operation runs", func(t *testing.T) {
		status, d := run(t, map[string]any{"code": `const pet = await mcp.petstore.getPetById({petId: 1});
			const sold = await mcp.petstore.findPetsByStatus({status: ["available", "sold"]});
			return {name: pet.name, photos: pet.photoUrls.length, found: sold.length}`})
		if status != http.StatusOK || !d.OK || string(d.Result) != `{"name":"doggie","photos":1,"found":1}` {
			t.Fatalf("status %d, result %s, error %+v\nprism: %s", status, d.Result, d.Error, api.Log())
		}
	})

	t.Run("a bad argument is refused before any request", func(t *testing.T) {
		before := api.Requests()
		status, d := run(t, map[string]any{"code": `const out = [];
			for (const args of [{petId: "one"}, {}, {petId: 1, petid: 2}]) {
			  try { await mcp.petstore.getPetById(args); out.push("sent") } catch (e) { out.push(e.code) }
			}
			return out`})
		if status != http.StatusOK || string(d.Result) != `["INVALID_ARGUMENTS","INVALID_ARGUMENTS","INVALID_ARGUMENTS"]` {
			t.Fatalf("status %d, result %s, error %+v", status, d.Result, d.Error)
		}
		if after := api.Requests(); after != before {
			t.Errorf("%d requests reached the service", after-before)
		}
	})

	t.Run("a write suspends for approval", func(t *testing.T) {
		before := api.Requests()
		status, d := run(t, map[string]any{"approval": "suspend", "code": `
			const order = await mcp.petstore.placeOrder({body: {petId: 1, quantity: 2, status: "placed"}});
			return {id: typeof order.id, status: order.status}`})
		if status != http.StatusAccepted || d.Status != "suspended" || len(d.Pending) != 1 {
			t.Fatalf("status %d, %+v, want suspended", status, d)
		}
		if p := d.Pending[0]; p.Server != "petstore" || p.Tool != "placeOrder" || p.Reason != "approval" || !strings.Contains(string(p.Args), `"quantity":2`) {
			t.Fatalf("pending %+v (args %s)", p, p.Args)
		}
		if n := api.Requests() - before; n != 0 {
			t.Fatalf("the write was sent before approval (%d requests)", n)
		}
		status, d = postJSONAs(t, resumeURL(base, d.ExecutionID), "", map[string]any{"decisions": map[string]string{"1": "approve"}})
		if status != http.StatusOK || !d.OK || string(d.Result) != `{"id":"number","status":"placed"}` {
			t.Fatalf("approved: status %d, result %s, error %+v", status, d.Result, d.Error)
		}
		if n := api.Requests() - before; n != 1 {
			t.Errorf("%d requests after approval, want 1", n)
		}
	})

	t.Run("a service error is a TOOL_ERROR with its status", func(t *testing.T) {
		status, d := run(t, map[string]any{"allow_destructive": true, "code": `
			try { await mcp.petstore.deletePet({petId: 1}); return "deleted" } catch (e) { return {code: e.code, message: e.message} }`})
		var got struct{ Code, Message string }
		_ = json.Unmarshal(d.Result, &got)
		if status != http.StatusOK || got.Code != "TOOL_ERROR" || !strings.Contains(got.Message, "HTTP 400") {
			t.Fatalf("status %d, result %s, error %+v", status, d.Result, d.Error)
		}
		if strings.Contains(string(d.Result), "tok-0815") || strings.Contains(string(d.Result), "special-key") {
			t.Errorf("a secret in the result: %s", d.Result)
		}
	})

	t.Run("discovery and narrowing", func(t *testing.T) {
		status, d := run(t, map[string]any{"code": `const hits = await tools.search("find pets by status", 3);
			return hits[0].server + ":" + hits[0].name + " " + hits[0].call`})
		if status != http.StatusOK || string(d.Result) != `"petstore:findPetsByStatus mcp.petstore.findPetsByStatus(args)"` {
			t.Fatalf("search: status %d, result %s, error %+v", status, d.Result, d.Error)
		}
		status, d = run(t, map[string]any{"tools": []string{"petstore:get*"}, "code": `
			const names = (await tools.list()).map(t => t.name);
			return {all: names.every(n => n.startsWith("get")), n: names.length}`})
		if status != http.StatusOK || string(d.Result) != `{"all":true,"n":4}` {
			t.Fatalf("narrowed: status %d, result %s, error %+v", status, d.Result, d.Error)
		}
		// Narrowed away, an operation is not there at all: the request is
		// refused before it runs.
		status, d = run(t, map[string]any{"tools": []string{"petstore:get*"}, "code": `return await mcp.petstore.findPetsByStatus({status: ["sold"]})`})
		if status != http.StatusUnprocessableEntity || d.Error == nil || d.Error.Code != "TOOL_NOT_FOUND" {
			t.Fatalf("narrowed away: status %d, result %s, error %+v", status, d.Result, d.Error)
		}
	})

	t.Run("healthz and metrics", func(t *testing.T) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"name":"petstore"`) || !strings.Contains(string(body), `"state":"healthy"`) ||
			!strings.Contains(string(body), `"transport":"openapi"`) {
			t.Errorf("/healthz: %s", body)
		}
		resp, err = http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `pml_tool_calls_total{`) || !strings.Contains(string(body), `server="petstore"`) {
			t.Errorf("/metrics has no petstore calls:\n%s", body)
		}
	})

	t.Run("pml run and pml tools", func(t *testing.T) {
		env := pmlEnv(t, petstoreSecrets...)
		out, code := runPML(t, env, "run", "--config", cfg, "-e", `const inv = await mcp.petstore.getInventory({}); return Object.keys(inv).length > 0`)
		if code != 0 || !strings.Contains(out, `"result": true`) {
			t.Fatalf("pml run: exit %d\n%s", code, out)
		}
		out, code = runPML(t, env, "tools", "--dts", "--config", cfg)
		if code != 0 {
			t.Fatalf("pml tools --dts: exit %d\n%s", code, out)
		}
		// The operation's response (a Pet) types its Promise.
		i := strings.Index(out, "getPetById(")
		if i < 0 {
			t.Fatalf("no getPetById in\n%s", out)
		}
		decl := out[i:]
		decl = decl[:strings.Index(decl, "}>;")+3]
		for _, want := range []string{"petId: number", "Promise<", "name: string", "photoUrls: string[]", `status?: "available" | "pending" | "sold"`} {
			if !strings.Contains(decl, want) {
				t.Errorf("getPetById's declaration lacks %q:\n%s", want, decl)
			}
		}
	})
}
