package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// MaxStructuredDepth bounds how deeply structured content may nest. Go's
// JSON decoder allows 10,000 levels and clients written in other languages
// often fewer (Python's recursive decoders stop near 1,000): content from a
// sandbox or an MCP sidecar deeper than this is passed as text only.
const MaxStructuredDepth = 64

// CheckStructured says why v (a decoded JSON value: maps, slices,
// strings, float64, json.Number, bool, nil) cannot be passed to clients as
// structured content: nested deeper than MaxStructuredDepth, or holding a
// number that no float64 holds (-1e999999), which every client decoding
// into doubles would fail on. nil means it can.
func CheckStructured(v any) error {
	return checkStructured(v, 1)
}

func checkStructured(v any, depth int) error {
	switch v := v.(type) {
	case map[string]any:
		if depth > MaxStructuredDepth {
			return fmt.Errorf("it is nested deeper than %d levels", MaxStructuredDepth)
		}
		for _, e := range v {
			if err := checkStructured(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		if depth > MaxStructuredDepth {
			return fmt.Errorf("it is nested deeper than %d levels", MaxStructuredDepth)
		}
		for _, e := range v {
			if err := checkStructured(e, depth+1); err != nil {
				return err
			}
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			if errors.Is(err, strconv.ErrRange) || err == nil {
				return fmt.Errorf("its number %.40s is out of the range of a double", string(v))
			}
			return fmt.Errorf("its number %.40s is not valid: %w", string(v), err)
		}
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Errorf("it holds %v, which JSON cannot carry", v)
		}
	}
	return nil
}
