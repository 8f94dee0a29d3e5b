package httpapi

import (
	"encoding"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
)

// The OpenAPI 3 description of the API (GET /openapi.json) is built from
// the route table and the Go types of the bodies, so it cannot drift from
// what the handlers decode and answer: a struct is an object that takes
// exactly its JSON fields (unknown fields are refused), a []byte is base64,
// an id (a TextMarshaler) a string, a number with the ",string" option (a
// node id) a string of digits.

// openAPIVersion is the version of the OpenAPI specification the
// description follows.
const openAPIVersion = "3.0.3"

// spec is the description, built once per handler.
type spec struct {
	once sync.Once
	doc  map[string]any
}

func (a *api) openAPI(w http.ResponseWriter, _ *http.Request) {
	a.spec.once.Do(func() { a.spec.doc = buildSpec(a.routes()) })
	writeJSON(w, http.StatusOK, a.spec.doc)
}

// pathParam finds the {name} segments of a mux pattern.
var pathParam = regexp.MustCompile(`\{([a-z]+)\}`) // not {$}

func buildSpec(routes []route) map[string]any {
	s := &schemas{byName: map[string]reflect.Type{}, out: map[string]any{}}
	s.out["Error"] = map[string]any{
		"type": "object",
		"properties": map[string]any{
			"error":    map[string]any{"type": "string", "description": "what went wrong"},
			"code":     map[string]any{"type": "string", "description": "the error's stable name"},
			"code_num": map[string]any{"type": "integer", "description": "the error's stable number"},
		},
	}
	paths := map[string]any{}
	for _, rt := range routes {
		op := map[string]any{
			"operationId": operationID(rt),
			"summary":     rt.summary,
			"tags":        []string{rt.tag},
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{
				"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"},
			})
		}
		for _, p := range rt.query {
			params = append(params, map[string]any{
				"name": p.name, "in": "query", "description": p.doc, "schema": map[string]any{"type": p.typ},
			})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.body != nil {
			op["requestBody"] = map[string]any{
				"required": !rt.optionalBody,
				"content":  map[string]any{"application/json": map[string]any{"schema": s.of(reflect.TypeOf(rt.body))}},
			}
		}
		ok := map[string]any{"description": "OK"}
		switch {
		case rt.raw != "":
			ok["content"] = map[string]any{rt.raw: map[string]any{"schema": map[string]any{"type": "string"}}}
			if rt.raw == "application/json" {
				ok["content"] = map[string]any{rt.raw: map[string]any{"schema": map[string]any{"type": "object"}}}
			}
		case rt.ndjson:
			ok["description"] = "One JSON value per line; a failure after the first line ends the stream with an Error line"
			ok["content"] = map[string]any{"application/x-ndjson": map[string]any{"schema": s.of(reflect.TypeOf(rt.resp))}}
		default:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": s.of(reflect.TypeOf(rt.resp))}}
		}
		op["responses"] = map[string]any{
			"200": ok,
			"default": map[string]any{
				"description": "An error",
				"content":     map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}},
			},
		}
		// ServeMux's {$} (the path ends here) is OpenAPI's plain path.
		path := strings.ReplaceAll(rt.path, "{$}", "")
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		item[strings.ToLower(rt.method)] = op
	}
	return map[string]any{
		"openapi": openAPIVersion,
		"info": map[string]any{
			"title":   "skuldd",
			"version": "1",
			"description": "The client API of a skuldd node over HTTP/JSON: the same operations as its QUIC protocol. " +
				"Payloads are base64, task ids 40 hex characters, node ids strings of digits, times Unix milliseconds, durations milliseconds. " +
				"With a cluster secret every endpoint but the probes needs Authorization: Bearer TOKEN.",
		},
		"paths":      paths,
		"security":   []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{"schemas": s.out, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

// operationID names a route uniquely from its method and path:
// "GET /v1/tasks/{id}" is get_v1_tasks_id.
func operationID(rt route) string {
	id := strings.ToLower(rt.method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "_").Replace(rt.path)
	return id
}

// schemas collects the component schemas of named struct types.
type schemas struct {
	byName map[string]reflect.Type
	out    map[string]any
}

var textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()

// of returns the schema of t: a $ref for a named struct, inline otherwise.
func (s *schemas) of(t reflect.Type) map[string]any {
	if t.Implements(textMarshaler) {
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.of(t.Elem())
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer", "format": intFormat(t)}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// int64 even for 32 bits: an unsigned 32-bit value is past int32.
		return map[string]any{"type": "integer", "format": "int64", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		if t.Elem().Kind() == reflect.Uint64 && t.Name() != "" {
			// A named list of node ids: strings of digits (wire.NodeIDs).
			return map[string]any{"type": "array", "items": digits()}
		}
		return map[string]any{"type": "array", "items": s.of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": s.of(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return s.object(t)
		}
		name := t.Name()
		if prev, ok := s.byName[name]; ok && prev != t {
			name = strings.ReplaceAll(t.String(), ".", "_")
		}
		if _, ok := s.byName[name]; !ok {
			s.byName[name] = t
			s.out[name] = map[string]any{} // placeholder: a type may refer to itself
			s.out[name] = s.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	case reflect.Interface:
		return map[string]any{}
	}
	panic(fmt.Sprintf("httpapi: no OpenAPI schema for %s", t))
}

// object is the schema of a struct: its JSON fields, embedded structs'
// promoted, and nothing else.
func (s *schemas) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	s.fields(t, props)
	return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
}

func (s *schemas) fields(t reflect.Type, props map[string]any) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				s.fields(ft, props)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if hasOpt(opts, "string") {
			props[name] = digits()
			continue
		}
		props[name] = nullable(s.of(f.Type), f.Type)
	}
}

// nullable marks the schema of a field whose Go zero value encodes as
// null (a nil pointer, slice or map); OpenAPI 3.0 ignores siblings of a
// $ref, so a reference goes under allOf.
func nullable(schema map[string]any, t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
	default:
		return schema
	}
	if t.Implements(textMarshaler) || t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		// A nil []byte is null too; an id is a value type.
		if t.Kind() != reflect.Slice {
			return schema
		}
	}
	if _, ref := schema["$ref"]; ref {
		return map[string]any{"allOf": []any{schema}, "nullable": true}
	}
	out := maps.Clone(schema)
	out["nullable"] = true
	return out
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// digits is the schema of a 64-bit number sent as a string (node ids:
// JSON numbers above 2^53 lose digits in JavaScript and jq).
func digits() map[string]any {
	return map[string]any{"type": "string", "pattern": "^[0-9]+$"}
}

func intFormat(t reflect.Type) string {
	if t.Bits() <= 32 {
		return "int32"
	}
	return "int64"
}
