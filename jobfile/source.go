package jobfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

const emptyMsg = "empty file: a job needs `tasks` or `template`"

// yamlDocument reads a YAML job file.
var yamlDocument = yamlfile.Document{Empty: emptyMsg, ParserLines: true}

// decodeJSON parses a .json job file with encoding/json, so that a JSON file
// is held to JSON's rules (no comments, no YAML extensions) and its syntax
// errors read like JSON errors, and builds the same node tree as the YAML
// reader, with lines and columns, so that the rest of the package is shared.
// maxDepth stops a deeply nested document while it is being read.
func decodeJSON(filename string, data []byte, maxDepth int) (*yaml.Node, error) {
	p := &jsonReader{file: filename, data: data, dec: json.NewDecoder(bytes.NewReader(data)), maxDepth: maxDepth}
	p.dec.UseNumber()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &Error{File: filename, Msg: emptyMsg}
	}
	root, err := p.value(0)
	if err != nil {
		return nil, err
	}
	start := p.skip(p.dec.InputOffset())
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		line, col := p.pos(start)
		return nil, &Error{File: filename, Line: line, Column: col, Msg: "JSON syntax: extra data after the top-level value"}
	}
	return root, nil
}

type jsonReader struct {
	file     string
	data     []byte
	dec      *json.Decoder
	maxDepth int
}

// skip moves off past the whitespace and separators between two tokens
// (Decoder.InputOffset is the end of the previous token), so that a node's
// position is where its token starts.
func (p *jsonReader) skip(off int64) int64 {
	for off < int64(len(p.data)) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	return off
}

// pos converts a byte offset into a 1-based line and column (in characters).
func (p *jsonReader) pos(off int64) (line, col int) {
	if off > int64(len(p.data)) {
		off = int64(len(p.data))
	}
	before := p.data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[lineStart:]) + 1
}

func (p *jsonReader) syntax(err error, at int64) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the bytes before the offending one.
		line, col := p.pos(max(se.Offset, 0))
		return &Error{File: p.file, Line: line, Column: col, Msg: yamlfile.OneLine("JSON syntax: " + se.Error())}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		line, col := p.pos(int64(len(p.data)))
		return &Error{File: p.file, Line: line, Column: col, Msg: "JSON syntax: unexpected end of file"}
	}
	line, col := p.pos(at)
	return &Error{File: p.file, Line: line, Column: col, Msg: yamlfile.OneLine("JSON syntax: " + err.Error())}
}

// value reads one JSON value (recursively) as a node.
func (p *jsonReader) value(depth int) (*yaml.Node, error) {
	start := p.skip(p.dec.InputOffset())
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.syntax(err, start)
	}
	line, col := p.pos(start)
	if depth > p.maxDepth {
		// The same rule as for YAML: the top-level value is at depth 0.
		return nil, &Error{File: p.file, Line: line, Column: col, Msg: fmt.Sprintf("nested more than %d levels deep", p.maxDepth)}
	}
	n := &yaml.Node{Line: line, Column: col}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.Kind, n.Tag, n.Style = yaml.MappingNode, "!!map", yaml.FlowStyle
			for p.dec.More() {
				kstart := p.skip(p.dec.InputOffset())
				ktok, err := p.dec.Token()
				if err != nil {
					return nil, p.syntax(err, kstart)
				}
				key, ok := ktok.(string)
				if !ok {
					// encoding/json reports non-string keys as syntax
					// errors itself; this is a safety net.
					kl, kc := p.pos(kstart)
					return nil, &Error{File: p.file, Line: kl, Column: kc, Msg: "JSON syntax: object keys must be strings"}
				}
				kl, kc := p.pos(kstart)
				k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key, Style: yaml.DoubleQuotedStyle, Line: kl, Column: kc}
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, k, v)
			}
		case '[':
			n.Kind, n.Tag, n.Style = yaml.SequenceNode, "!!seq", yaml.FlowStyle
			for p.dec.More() {
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		default:
			return nil, &Error{File: p.file, Line: line, Column: col, Msg: fmt.Sprintf("JSON syntax: unexpected %q", rune(t))}
		}
		end := p.skip(p.dec.InputOffset())
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, p.syntax(err, end)
		}
		return n, nil
	case string:
		n.Kind, n.Tag, n.Value, n.Style = yaml.ScalarNode, "!!str", t, yaml.DoubleQuotedStyle
	case json.Number:
		n.Kind, n.Value = yaml.ScalarNode, string(t)
		n.Tag = "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			n.Tag = "!!float"
		}
	case bool:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(t)
	case nil:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
	default:
		return nil, &Error{File: p.file, Line: line, Column: col, Msg: fmt.Sprintf("JSON syntax: unexpected token %v", tok)}
	}
	return n, nil
}
