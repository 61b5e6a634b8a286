package events_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sandboxd/sandboxd/events"
	"github.com/sandboxd/sandboxd/manifest"
)

func mf(t *testing.T, id string, mutating *bool, metadata string) *manifest.Manifest {
	t.Helper()
	doc := map[string]any{
		"id": id, "version": "1.0.0", "description": "test tool",
		"input": map[string]any{"type": "object"}, "output": map[string]any{},
	}
	if mutating != nil {
		doc["mutating"] = *mutating
	}
	if metadata != "" {
		doc["metadata"] = json.RawMessage(metadata)
	}
	b, _ := json.Marshal(doc)
	m, err := manifest.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)

const readMeta = `{"x.ai/tool":{"kind":"read","input":{"path":"/file_path","offset":"/offset","limit":"/limit"}}}`

// Golden envelopes: field order, kinds, labels, read_only and projection.
func TestMetaGolden(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutating *bool
		metadata string
		input    string
		want     string
	}{
		{"read tool with path offset limit", no, readMeta,
			`{"file_path":"/etc/hosts","offset":10,"limit":20,"old_string":"bulky"}`,
			`{"version":1,"name":"fs.read","kind":"read","namespace":"mcp","label":"Read","read_only":true,"input":{"path":"/etc/hosts","offset":10,"limit":20}}`},
		{"offset 0 becomes 1", no, readMeta,
			`{"file_path":"/a","offset":0}`,
			`{"version":1,"name":"fs.read","kind":"read","namespace":"mcp","label":"Read","read_only":true,"input":{"path":"/a","offset":1}}`},
		{"negative offset dropped", no, readMeta,
			`{"file_path":"/a","offset":-5,"limit":3}`,
			`{"version":1,"name":"fs.read","kind":"read","namespace":"mcp","label":"Read","read_only":true,"input":{"path":"/a","limit":3}}`},
		{"execute tool with command and description", yes,
			`{"x.ai/tool":{"kind":"execute","input":{"command":"/cmd","description":"/why","cwd":"/dir/0","timeout":"/timeout"}}}`,
			`{"cmd":"ls","why":"list files","dir":["/tmp"],"timeout":30}`,
			`{"version":1,"name":"fs.read","kind":"execute","namespace":"mcp","label":"Run Command","read_only":false,"input":{"command":"ls","description":"list files","cwd":"/tmp"}}`},
		{"tool without mapping", no, `{"x.ai/tool":{"kind":"search"}}`,
			`{"pattern":"x"}`,
			`{"version":1,"name":"fs.read","kind":"search","namespace":"mcp","label":"Search","read_only":true}`},
		{"no metadata at all, mutating absent", nil, "",
			`{"path":"/a"}`,
			`{"version":1,"name":"fs.read","kind":"other","namespace":"mcp","label":"Tool","read_only":false}`},
		{"unknown kind reads as other", no, `{"x.ai/tool":{"kind":"teleport","input":{"path":"/p"}}}`,
			`{"p":"/x"}`,
			`{"version":1,"name":"fs.read","kind":"other","namespace":"mcp","label":"Tool","read_only":true,"input":{"path":"/x"}}`},
		{"wrong types and missing sources left out", no,
			`{"x.ai/tool":{"kind":"grep","input":{"path":"/n","offset":"/s","limit":"/f","pattern":"/missing"}}}`,
			`{"n":5,"s":"x","f":1.5}`,
			`{"version":1,"name":"fs.read","kind":"other","namespace":"mcp","label":"Tool","read_only":true}`},
		{"all eight fields in canonical order", no,
			`{"x.ai/tool":{"kind":"list_dir","input":{"pattern":"/h","directory":"/g","cwd":"/f","description":"/e","command":"/d","limit":"/c","offset":"/b","path":"/a"}}}`,
			`{"h":"*.go","g":"src","f":"/w","e":"d","d":"c","c":1e2,"b":2.0,"a":"p"}`,
			`{"version":1,"name":"fs.read","kind":"list_dir","namespace":"mcp","label":"List Files","read_only":true,"input":{"path":"p","offset":2,"limit":100,"command":"c","description":"d","cwd":"/w","directory":"src","pattern":"*.go"}}`},
		{"pointer escapes", no,
			`{"x.ai/tool":{"kind":"read","input":{"path":"/a~1b/c~0d"}}}`,
			`{"a/b":{"c~d":"/deep"}}`,
			`{"version":1,"name":"fs.read","kind":"read","namespace":"mcp","label":"Read","read_only":true,"input":{"path":"/deep"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mf(t, "fs.read", tc.mutating, tc.metadata)
			b, err := json.Marshal(events.NewMeta(m, []byte(tc.input)))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

// Before validation (nil input) the envelope has no input even with a
// mapping.
func TestMetaWithoutInput(t *testing.T) {
	b, _ := json.Marshal(events.NewMeta(mf(t, "fs.read", no, readMeta), nil))
	want := `{"version":1,"name":"fs.read","kind":"read","namespace":"mcp","label":"Read","read_only":true}`
	if string(b) != want {
		t.Fatalf("got %s", b)
	}
}

func TestLabels(t *testing.T) {
	for kind, label := range map[string]string{
		"read": "Read", "edit": "Edit", "execute": "Run Command", "web_fetch": "Web Fetch",
		"video_gen": "Generate Video", "reference_to_video": "Generate Video", "other": "Tool",
		"": "Tool", "READ": "Tool", "goal_update": "Update Goal", "list": "List Files",
	} {
		if got := events.Label(kind); got != label {
			t.Errorf("Label(%q) = %q, want %q", kind, got, label)
		}
	}
}

func FuzzProject(f *testing.F) {
	f.Add(`{"a":{"b":[1,"x"]}}`, "/a/b/1", "/a/b/0")
	f.Add(`[]`, "", "/0")
	f.Fuzz(func(t *testing.T, input, p1, p2 string) {
		in := events.Project([]byte(input), map[string]string{"path": p1, "offset": p2, "limit": p2})
		if in == nil {
			return
		}
		b, err := json.Marshal(in)
		if err != nil || !json.Valid(b) {
			t.Fatalf("projection does not marshal: %v", err)
		}
		if in.Offset != nil && (string(in.Offset) == "0" || in.Offset[0] == '-') {
			t.Fatalf("offset %s", in.Offset)
		}
	})
}

func ExampleNewMeta() {
	m, _ := manifest.Parse([]byte(`{"id":"fs.read","version":"1.0.0","description":"reads","input":{},"output":{},"mutating":false,
		"metadata":{"x.ai/tool":{"kind":"read","input":{"path":"/file_path","offset":"/offset"}}}}`))
	b, _ := json.Marshal(events.NewMeta(m, []byte(`{"file_path":"/etc/hosts","offset":0}`)))
	fmt.Println(string(b))
	// Output: {"version":1,"name":"fs.read","kind":"read","namespace":"mcp","label":"Read","read_only":true,"input":{"path":"/etc/hosts","offset":1}}
}
