package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Document says how one kind of file (a job file, a scenario) reads its
// single YAML document into a node tree, reporting every problem as an
// *Error naming the file.
type Document struct {
	// Empty is the message for a file that holds no document.
	Empty string
	// ParserLines adds the 1 that yaml.v3 leaves out of the line of
	// libyaml's parser errors (see parserProblems). The scenario reader
	// does without, so that its messages stay as its tests pin them.
	ParserLines bool
}

var yamlLineRE = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

// parserProblems are the messages of libyaml's parser (as opposed to its
// scanner). yaml.v3 reports their line 0-based (it adds 1 only for scanner
// errors), pointing at the start of the construct being parsed.
var parserProblems = []string{
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected key",
	"did not find expected '-' indicator",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
}

// SyntaxError turns a yaml.v3 syntax error into an *Error with the file
// name and, when the message has one, the line.
func (d Document) SyntaxError(file string, err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if d.ParserLines && slices.Contains(parserProblems, m[2]) {
			line++
		}
		return &Error{File: file, Line: line, Msg: OneLine("YAML syntax: " + m[2])}
	}
	return &Error{File: file, Msg: OneLine("YAML syntax: " + strings.TrimPrefix(msg, "yaml: "))}
}

// Decode parses data into a node tree: exactly one document. It returns
// the document's root node.
func (d Document) Decode(filename string, data []byte) (root *yaml.Node, err error) {
	// yaml.v3 has panicked on crafted input in the past; these files are
	// user input, so a panic inside the YAML parser becomes an error, not a
	// crash. (Only here: a panic in the readers' own code stays a panic,
	// so that fuzzing finds it.)
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, &Error{File: filename, Msg: OneLine(fmt.Sprintf("cannot parse YAML: %v", r))}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: filename, Msg: d.Empty}
		}
		return nil, d.SyntaxError(filename, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, d.SyntaxError(filename, err)
		}
		return nil, &Error{File: filename, Line: extra.Line, Column: extra.Column, Msg: "only one YAML document is allowed (remove the second ---)"}
	}
	root = &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	return root, nil
}
