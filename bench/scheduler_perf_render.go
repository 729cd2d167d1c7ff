// scheduler_perf's template rendering, outside its package: bench/scheduler_perf.py builds and runs
// this file (standard library only) to render upstream's node, ResourceSlice, DeviceClass and pod
// templates exactly as test/integration/scheduler_perf does: Go's text/template with the same
// function map (operations.go, getTemplateFuncs) and the same environment (the op's resolved
// templateParams as JSON decodes them, float64 for numbers, plus Index and Count as int).
//
// stdin: [{"path": "...", "params": {...}, "count": N}, ...]
// stdout: [["<rendered object 0>", ..., "<rendered object N-1>"], ...]
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/template"
)

type request struct {
	Path   string         `json:"path"`
	Params map[string]any `json:"params"`
	Count  int            `json:"count"`
}

func main() {
	var reqs []request
	if err := json.NewDecoder(os.Stdin).Decode(&reqs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := make([][]string, 0, len(reqs))
	for _, r := range reqs {
		content, err := os.ReadFile(r.Path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		tmpl, err := template.New("object").Funcs(funcs()).Parse(string(content))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", r.Path, err)
			os.Exit(1)
		}
		objs := make([]string, 0, r.Count)
		for i := 0; i < r.Count; i++ {
			env := map[string]any{}
			for k, v := range r.Params {
				env[k] = v
			}
			env["Index"] = i
			env["Count"] = r.Count
			var buf bytes.Buffer
			if err := tmpl.Execute(&buf, env); err != nil {
				fmt.Fprintf(os.Stderr, "%s, index %d: %v\n", r.Path, i, err)
				os.Exit(1)
			}
			objs = append(objs, buf.String())
		}
		out = append(out, objs)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// The functions of scheduler_perf's getTemplateFuncs (operations.go, k8s.io/kubernetes v1.37.2).
func funcs() template.FuncMap {
	return template.FuncMap{
		"AddFloat":      addFloat,
		"AddInt":        func(n ...any) int { return int(addFloat(n...)) },
		"DivideFloat":   divideFloat,
		"DivideInt":     func(i, j any) int { return int(divideFloat(i, j)) },
		"Int":           toInt,
		"JSON":          toJSON,
		"Mod":           func(a, b any) int { return int(toFloat64(a)) % int(toFloat64(b)) },
		"MultiplyFloat": multiplyFloat,
		"MultiplyInt":   func(n ...any) int { return int(multiplyFloat(n...)) },
		"SubtractFloat": func(i, j any) float64 { return toFloat64(i) - toFloat64(j) },
		"SubtractInt":   func(i, j any) int { return int(toFloat64(i) - toFloat64(j)) },
	}
}

func toFloat64(val any) float64 {
	switch i := val.(type) {
	case float64:
		return i
	case int:
		return float64(i)
	case string:
		if f, err := strconv.ParseFloat(i, 64); err == nil {
			return f
		}
	}
	panic(fmt.Sprintf("cannot cast %v to float64", val))
}

func toInt(val any) int {
	switch i := val.(type) {
	case float64:
		return int(i)
	case int:
		return i
	case string:
		if v, err := strconv.Atoi(i); err == nil {
			return v
		}
	}
	panic(fmt.Sprintf("cannot cast %v to int", val))
}

func toJSON(val any) string {
	var buffer strings.Builder
	encoder := json.NewEncoder(&buffer)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(val); err != nil {
		panic(fmt.Sprintf("cannot JSON-encode %v: %v", val, err))
	}
	return strings.TrimSpace(buffer.String())
}

func addFloat(numbers ...any) float64 {
	sum := 0.0
	for _, n := range numbers {
		sum += toFloat64(n)
	}
	return sum
}

func multiplyFloat(numbers ...any) float64 {
	product := 1.0
	for _, n := range numbers {
		product *= toFloat64(n)
	}
	return product
}

func divideFloat(i, j any) float64 {
	if toFloat64(j) == 0 {
		panic("division by zero")
	}
	return toFloat64(i) / toFloat64(j)
}
