package main

import (
	"bufio"
	"io"
	"strings"
)

// sseEvent is one server-sent event: its id (empty when it set none), its
// name ("message" when unnamed) and its data lines joined by "\n".
type sseEvent struct {
	id, name, data string
}

// readEvents reads the server-sent events of r in order and calls fn with
// each; it returns when fn returns true, at the end of r (nil) or on a read
// error. Comment lines (": …") are skipped; a line is at most 4 MiB.
func readEvents(r io.Reader, fn func(sseEvent) (stop bool)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var ev sseEvent
	var data []string
	seen := false // a field of the current event was read
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if seen {
				ev.name, ev.data = nonEmpty(ev.name, "message"), strings.Join(data, "\n")
				if fn(ev) {
					return nil
				}
			}
			ev, data, seen = sseEvent{}, nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		seen = true
		switch field {
		case "id":
			ev.id = value
		case "event":
			ev.name = value
		case "data":
			data = append(data, value)
		}
	}
	return sc.Err()
}

func nonEmpty(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
