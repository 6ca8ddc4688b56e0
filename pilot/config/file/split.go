package file

import "bytes"

// splitDocuments cuts a multi-document YAML file at its "---" separator
// lines. Every separator starts a new document, so indexes stay stable when
// a document in the middle becomes empty.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	start := 0
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		if isSeparator(data[pos:next]) {
			docs = append(docs, data[start:pos])
			start = next
		}
		pos = next
	}
	return append(docs, data[start:])
}

func isSeparator(line []byte) bool {
	line = bytes.TrimRight(line, "\r\n")
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := line[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}
