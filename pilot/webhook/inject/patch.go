package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The JSONPatch (RFC 6902) between the received and the injected pod is
// computed here rather than with a library: the inputs are two JSON trees
// from the same Go type, so a short recursive diff is enough, and it keeps
// the dependency set small. Objects are diffed key by key; arrays of equal
// length element by element; an array whose length changed (containers,
// volumes…) is replaced whole, which stays correct whatever moved inside.

// operation is one JSONPatch operation; Value is absent for remove.
type operation struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// createPatch returns the JSONPatch turning JSON document from into to.
// It stops with ctx's error once ctx ends.
func createPatch(ctx context.Context, from, to []byte) ([]byte, error) {
	a, err := decodeJSON(from)
	if err != nil {
		return nil, fmt.Errorf("original object: %w", err)
	}
	b, err := decodeJSON(to)
	if err != nil {
		return nil, fmt.Errorf("injected object: %w", err)
	}
	ops := []operation{}
	if err := diff(ctx, a, b, "", &ops); err != nil {
		return nil, err
	}
	return json.Marshal(ops)
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func diff(ctx context.Context, a, b any, path string, ops *[]operation) error {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return replaceOp(b, path, ops)
		}
		for _, k := range slices.Sorted(maps.Keys(av)) {
			if _, ok := bv[k]; !ok {
				*ops = append(*ops, operation{Op: "remove", Path: path + "/" + escapePointer(k)})
			}
		}
		for _, k := range slices.Sorted(maps.Keys(bv)) {
			p := path + "/" + escapePointer(k)
			old, ok := av[k]
			if !ok {
				raw, err := json.Marshal(bv[k])
				if err != nil {
					return err
				}
				*ops = append(*ops, operation{Op: "add", Path: p, Value: raw})
				continue
			}
			if err := diff(ctx, old, bv[k], p, ops); err != nil {
				return err
			}
		}
		return nil
	case []any:
		bv, ok := b.([]any)
		if !ok || len(bv) != len(av) {
			return replaceOp(b, path, ops)
		}
		for i := range av {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := diff(ctx, av[i], bv[i], path+"/"+strconv.Itoa(i), ops); err != nil {
				return err
			}
		}
		return nil
	default:
		if scalarEqual(a, b) {
			return nil
		}
		return replaceOp(b, path, ops)
	}
}

func scalarEqual(a, b any) bool {
	switch av := a.(type) {
	case nil:
		return b == nil
	case json.Number:
		bv, ok := b.(json.Number)
		return ok && av == bv
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	}
	return false
}

func replaceOp(v any, path string, ops *[]operation) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	*ops = append(*ops, operation{Op: "replace", Path: path, Value: raw})
	return nil
}
