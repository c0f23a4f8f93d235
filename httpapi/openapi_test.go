package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

type openAPI struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]schema `json:"schemas"`
	} `json:"components"`
}

type schema struct {
	Ref        string                     `json:"$ref"`
	Properties map[string]json.RawMessage `json:"properties"`
	AllOf      []schema                   `json:"allOf"`
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	var doc openAPI
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	return doc
}

// docPath is a router pattern as an OpenAPI path: the rest-of-path
// parameters are single parameters there.
func docPath(pattern string) string {
	return strings.NewReplacer("{id...}", "{id}", "{rest...}", "{path}").Replace(pattern)
}

// TestOpenAPIMatchesRouter: every route of the router is in the document,
// with its method, and the document has nothing else; GET
// /api/openapi.json serves it.
func TestOpenAPIMatchesRouter(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	doc := loadOpenAPI(t)
	var inDoc, inRouter []string
	for p, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				inDoc = append(inDoc, strings.ToUpper(m)+" "+p)
			}
		}
	}
	s, err := New(Config{JWTSecret: testSecret}, e.st, e.ctl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range s.routes {
		inRouter = append(inRouter, rt.method+" "+docPath(rt.pattern))
	}
	sort.Strings(inDoc)
	sort.Strings(inRouter)
	for _, r := range inRouter {
		if !slices.Contains(inDoc, r) {
			t.Errorf("the router has %s; the OpenAPI document does not", r)
		}
	}
	for _, d := range inDoc {
		if !slices.Contains(inRouter, d) {
			t.Errorf("the OpenAPI document has %s; the router does not", d)
		}
	}
	r := e.req("GET", "/api/openapi.json", tok, nil)
	if r.status != 200 || !bytes.Equal(r.body, openAPIDoc) || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
}

// jsonFields are the JSON names of t's fields (embedded structs flattened).
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// properties are a schema's property names, those of its allOf parts
// (references followed in doc) too.
func (s schema) properties(doc openAPI) []string {
	if s.Ref != "" {
		return doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")].properties(doc)
	}
	var out []string
	for p := range s.Properties {
		out = append(out, p)
	}
	for _, part := range s.AllOf {
		out = append(out, part.properties(doc)...)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPISchemasMatchTypes: each schema names exactly the JSON fields
// of the Go type the API encodes (or decodes) for it.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Task": core.Task{}, "Worker": core.WorkerInfo{}, "GPU": core.GPU{}, "Code": core.CodeInfo{},
		"User": userJSON{}, "Me": meJSON{}, "AdminUser": adminUserJSON{}, "Notifications": notifyJSON{}, "LogPage": logPage{},
		"Health": healthJSON{}, "Submission": submitBody{}, "Submitted": submitted{}, "Credentials": credentials{},
		"AdminUserItem": userItemJSON{}, "UserUsage": core.UserUsage{}, "Quota": core.Quota{}, "QuotaItem": quotaItem{}, "QueueItem": core.QueueItem{},
		"UserPatch": struct {
			Role     *core.Role `json:"role"`
			Disabled *bool      `json:"disabled"`
			Password *string    `json:"password"`
		}{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is missing", name)
			continue
		}
		if got, want := s.properties(doc), jsonFields(reflect.TypeOf(v)); !slices.Equal(got, want) {
			t.Errorf("schema %s has %v; the Go type's JSON has %v", name, got, want)
		}
	}
}

// TestOpenAPIValidates runs a real validator on the document
// (@apidevtools/swagger-parser in tools/openapi, installed by .ci/run with
// `npm ci --prefix tools/openapi`): the OpenAPI 3.1 schema and every $ref.
func TestOpenAPIValidates(t *testing.T) {
	node, err := exec.LookPath("node")
	tool := filepath.Join("..", "tools", "openapi")
	if _, serr := os.Stat(filepath.Join(tool, "node_modules", "@apidevtools", "swagger-parser")); err != nil || serr != nil {
		msg := "node or tools/openapi/node_modules missing: npm ci --prefix tools/openapi"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join(tool, "validate.mjs"), "openapi.json").CombinedOutput()
	if err != nil {
		t.Fatalf("the OpenAPI validator refused openapi.json: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "valid: OpenAPI 3.1") {
		t.Fatalf("the validator said: %s", out)
	}
}
