package inject

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// applyPatch applies a JSONPatch of add/remove/replace operations; the
// tests use it to check that Admit's patch really produces the injected pod.
func applyPatch(doc, patch []byte) ([]byte, error) {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	var ops []operation
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, err
	}
	for _, op := range ops {
		var val any
		if op.Op != "remove" {
			if err := json.Unmarshal(op.Value, &val); err != nil {
				return nil, fmt.Errorf("%s %s: %w", op.Op, op.Path, err)
			}
		}
		var err error
		if root, err = applyOp(root, pointerTokens(op.Path), op.Op, val); err != nil {
			return nil, fmt.Errorf("%s %s: %w", op.Op, op.Path, err)
		}
	}
	return json.Marshal(root)
}

func pointerTokens(p string) []string {
	if p == "" {
		return nil
	}
	toks := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

func applyOp(node any, toks []string, op string, val any) (any, error) {
	if len(toks) == 0 {
		if op == "remove" {
			return nil, nil
		}
		return val, nil
	}
	tok, rest := toks[0], toks[1:]
	switch n := node.(type) {
	case map[string]any:
		child, ok := n[tok]
		if len(rest) == 0 {
			switch op {
			case "add":
				n[tok] = val
			case "replace":
				if !ok {
					return nil, fmt.Errorf("replace of missing key %q", tok)
				}
				n[tok] = val
			case "remove":
				if !ok {
					return nil, fmt.Errorf("remove of missing key %q", tok)
				}
				delete(n, tok)
			default:
				return nil, fmt.Errorf("unsupported op %q", op)
			}
			return n, nil
		}
		if !ok {
			return nil, fmt.Errorf("missing key %q", tok)
		}
		c, err := applyOp(child, rest, op, val)
		if err != nil {
			return nil, err
		}
		n[tok] = c
		return n, nil
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(n) {
			return nil, fmt.Errorf("bad index %q", tok)
		}
		if len(rest) == 0 && op != "replace" {
			return nil, fmt.Errorf("unsupported array op %q", op)
		}
		c, err := applyOp(n[i], rest, op, val)
		if err != nil {
			return nil, err
		}
		n[i] = c
		return n, nil
	}
	return nil, fmt.Errorf("cannot descend into %T at %q", node, tok)
}
