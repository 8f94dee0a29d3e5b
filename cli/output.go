package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	ucli "github.com/urfave/cli/v2"
)

// printer is where a ctl command writes its results: JSON, one value per
// line (the default, for scripts), or tables for people (-o table).
type printer interface {
	Encode(v any) error
	// Flush writes what the printer holds back (a table waits for its
	// last row to align its columns).
	Flush() error
}

// Output formats (--output).
const (
	outputJSON  = "json"
	outputTable = "table"
)

func newPrinter(c *ucli.Context, w io.Writer) (printer, error) {
	switch o := c.String("output"); o {
	case "", outputJSON:
		return jsonPrinter{json.NewEncoder(w)}, nil
	case outputTable:
		return &tablePrinter{w: w, loc: time.Local}, nil
	default:
		return nil, usagef("--output %q: want json or table", o)
	}
}

type jsonPrinter struct{ *json.Encoder }

func (jsonPrinter) Flush() error { return nil }

// tablePrinter prints values of one type that follow each other as one
// table, a row each, columns aligned: times in local time, durations as
// durations, payloads as text when they are printable. A run of one
// value is shown whole instead: its fields one per line, then each list
// of records in it as a table of its own (ctl cluster: members,
// partitions). Columns empty in every row are left out.
type tablePrinter struct {
	w   io.Writer
	loc *time.Location
	// run is the values of one type not yet printed.
	run     []reflect.Value
	printed bool
}

func (p *tablePrinter) Encode(v any) error {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if len(p.run) > 0 && p.run[0].Type() != rv.Type() {
		if err := p.Flush(); err != nil {
			return err
		}
	}
	p.run = append(p.run, rv)
	return nil
}

func (p *tablePrinter) Flush() error {
	run := p.run
	p.run = nil
	if len(run) == 0 {
		return nil
	}
	if p.printed {
		if _, err := fmt.Fprintln(p.w); err != nil {
			return err
		}
	}
	p.printed = true
	if len(run) == 1 && run[0].Kind() == reflect.Struct {
		return p.whole(run[0], "")
	}
	return p.table(run, "")
}

// whole prints one record: its fields one per line, then its nested
// records and lists of records, each under its title.
func (p *tablePrinter) whole(v reflect.Value, title string) error {
	var lines [][2]string
	type sub struct {
		title string
		v     reflect.Value
	}
	var subs []sub
	for _, f := range fieldsOf(v) {
		switch {
		case isRecords(f.v):
			if f.v.Len() > 0 {
				subs = append(subs, sub{f.name, f.v})
			}
		case isRecord(f.v):
			if !isZero(f.v) {
				subs = append(subs, sub{f.name, f.v})
			}
		case f.omit && isZero(f.v):
			// As the JSON does: nothing to say.
		default:
			if s := p.cell(f, false); s != "" {
				lines = append(lines, [2]string{f.label(), s})
			}
		}
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	if title != "" {
		fmt.Fprintf(tw, "%s\n", strings.ToUpper(title))
	}
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%s\n", l[0], l[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, s := range subs {
		if i > 0 || len(lines) > 0 || title != "" {
			if _, err := fmt.Fprintln(p.w); err != nil {
				return err
			}
		}
		var err error
		if s.v.Kind() == reflect.Slice {
			rows := make([]reflect.Value, 0, s.v.Len())
			for i := range s.v.Len() {
				rows = append(rows, deref(s.v.Index(i)))
			}
			err = p.table(rows, s.title)
		} else {
			err = p.whole(deref(s.v), s.title)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// table prints records (or plain values) as rows under a header.
func (p *tablePrinter) table(rows []reflect.Value, title string) error {
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	if title != "" {
		fmt.Fprintf(tw, "%s\n", strings.ToUpper(title))
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(none)")
		return tw.Flush()
	}
	if rows[0].Kind() != reflect.Struct {
		for _, r := range rows {
			fmt.Fprintln(tw, p.cell(field{v: r}, true))
		}
		return tw.Flush()
	}
	var header []string
	cells := make([][]string, len(rows))
	for ri, r := range rows {
		for _, f := range fieldsOf(r) {
			if ri == 0 {
				header = append(header, f.label())
			}
			cells[ri] = append(cells[ri], p.cell(f, true))
		}
	}
	// Leave out the columns empty in every row.
	var keep []int
	for ci := range header {
		for ri := range cells {
			if ci < len(cells[ri]) && cells[ri][ci] != "" {
				keep = append(keep, ci)
				break
			}
		}
	}
	line := func(vals []string) {
		out := make([]string, 0, len(keep))
		for _, ci := range keep {
			s := ""
			if ci < len(vals) {
				s = vals[ci]
			}
			if s == "" {
				s = "-"
			}
			out = append(out, s)
		}
		fmt.Fprintln(tw, strings.Join(out, "\t"))
	}
	line(header)
	for _, r := range cells {
		line(r)
	}
	return tw.Flush()
}

// field is one JSON field of a record.
type field struct {
	name string // the JSON name
	v    reflect.Value
	// omit: the JSON leaves the field out when it is zero (omitempty).
	omit bool
}

// label is the column's title: the JSON name, its unit dropped (a
// duration shows its own), in capitals.
func (f field) label() string {
	name := f.name
	for _, unit := range []string{"_ms", "_us"} {
		if strings.HasSuffix(name, unit) && isInt(f.v) {
			name = strings.TrimSuffix(name, unit)
		}
	}
	return strings.ToUpper(name)
}

// fieldsOf lists v's JSON fields in their order, embedded structs'
// promoted.
func fieldsOf(v reflect.Value) []field {
	var out []field
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
			out = append(out, fieldsOf(v.Field(i))...)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, field{name: name, v: v.Field(i), omit: slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return out
}

// maxCell bounds a payload shown in a row; the whole record (one value)
// shows it all.
const maxCell = 48

// cell formats one field's value ("" for nothing to show).
func (p *tablePrinter) cell(f field, inRow bool) string {
	v := deref(f.v)
	if !v.IsValid() {
		return ""
	}
	if tm, ok := v.Interface().(interface{ MarshalText() ([]byte, error) }); ok && v.Kind() != reflect.Slice {
		b, _ := tm.MarshalText()
		return string(b)
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return "yes"
		}
		return ""
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := v.Int()
		switch {
		case isTimeField(f.name):
			if n <= 0 {
				return ""
			}
			return time.UnixMilli(n).In(p.loc).Format("2006-01-02 15:04:05.000")
		case strings.HasSuffix(f.name, "_ms"), strings.HasSuffix(f.name, "_us"):
			if n == 0 && f.v.Kind() != reflect.Pointer {
				return "" // unset; a pointer set to 0 says 0 on purpose
			}
			unit := time.Millisecond
			if strings.HasSuffix(f.name, "_us") {
				unit = time.Microsecond
			}
			return (time.Duration(n) * unit).String()
		}
		return strconv.FormatInt(n, 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.String:
		return v.String()
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 && v.Kind() == reflect.Slice {
			return payload(v.Bytes(), inRow)
		}
		if isRecords(v) {
			if v.Len() == 0 {
				return ""
			}
			return fmt.Sprintf("(%d)", v.Len())
		}
		parts := make([]string, 0, v.Len())
		for i := range v.Len() {
			parts = append(parts, p.cell(field{name: f.name, v: v.Index(i)}, inRow))
		}
		return strings.Join(parts, ",")
	case reflect.Map:
		if v.Len() == 0 {
			return ""
		}
		b, _ := json.Marshal(v.Interface())
		return string(b)
	case reflect.Struct:
		b, _ := json.Marshal(v.Interface())
		return string(b)
	}
	return fmt.Sprint(v.Interface())
}

// isTimeField reports whether a field of that JSON name holds a time
// (Unix milliseconds).
func isTimeField(name string) bool {
	switch name {
	case "at", "start", "end", "until", "time", "next", "done", "completed", "not_before":
		return true
	}
	return strings.HasSuffix(name, "_at")
}

// payload shows bytes as text when they are printable UTF-8, else as
// base64 (marked so); in a row, shortened.
func payload(b []byte, inRow bool) string {
	if len(b) == 0 {
		return ""
	}
	s := string(b)
	if !printable(s) {
		s = "base64:" + base64.StdEncoding.EncodeToString(b)
	}
	if inRow {
		s = strings.Join(strings.Fields(s), " ")
		if utf8.RuneCountInString(s) > maxCell {
			s = string([]rune(s)[:maxCell-1]) + "…"
		}
	}
	return s
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

func deref(v reflect.Value) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

func isInt(v reflect.Value) bool {
	t := v.Type()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

// isRecord reports whether v is a record: a struct (or a pointer to one)
// that is not a value shown as text (an id).
func isRecord(v reflect.Value) bool { return recordType(v.Type()) }

// isRecords reports whether v is a list of records.
func isRecords(v reflect.Value) bool {
	return v.Kind() == reflect.Slice && recordType(v.Type().Elem())
}

func recordType(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	_, text := reflect.New(t).Interface().(interface{ MarshalText() ([]byte, error) })
	return t.Kind() == reflect.Struct && !text
}

func isZero(v reflect.Value) bool {
	v = deref(v)
	return !v.IsValid() || v.IsZero()
}
