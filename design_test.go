package main_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDesignCitations: every comment that cites a section of
// docs/design.md ("docs/design.md, Partition leaders") names one of its
// headings, so a reader who follows the citation finds it. A citation
// wrapped over lines is checked by its first line's words: they must
// begin a heading, or a heading must begin them.
func TestDesignCitations(t *testing.T) {
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for line := range strings.SplitSeq(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings = append(headings, h)
		} else if h, ok := strings.CutPrefix(line, "### "); ok {
			headings = append(headings, h)
		}
	}
	cite := regexp.MustCompile(`docs/design\.md[,:]? *["“]?([A-Z][A-Za-z -]*)`)
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			for _, m := range cite.FindAllStringSubmatch(sc.Text(), -1) {
				found++
				name := strings.TrimSpace(m[1])
				ok := false
				for _, h := range headings {
					if strings.HasPrefix(name, h) || strings.HasPrefix(h, name) {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%s:%d cites docs/design.md, %q: no such heading (%v)", path, n, name, headings)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("%d citations found; the code has more (the pattern broke?)", found)
	}
}
