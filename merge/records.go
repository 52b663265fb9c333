package merge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// RecordFile is one shard's records (tokentap matrix --records), to read
// from R and call Name in messages.
type RecordFile struct {
	Name string
	R    io.Reader
}

// maxRecordLine bounds one JSONL line: a record of a long stream is tens of
// KiB; anything this long is not a record.
const maxRecordLine = 64 << 20

// Records concatenates the shards' record files into w, one JSONL file the
// record tools read (lines copied as they are, so nothing a newer tokentap
// wrote is lost). Every line must be a record of a shard of run: its id
// starts with its shard ("s1/…"), each file holds one shard's, no shard
// comes in two files, no id twice, and every request was sent during the
// run (a file of another run is refused). It returns how many records it
// wrote.
func Records(w io.Writer, run *result.Result, files []RecordFile) (int, error) {
	if run.Sharding == nil {
		return 0, errors.New("records: the run is not a sharded run")
	}
	from := run.Sharding.StartAt.Add(-time.Minute)
	to := run.Ended.Add(time.Minute)
	bw := bufio.NewWriterSize(w, 256<<10)
	ids := map[string]bool{}
	fileOf := map[int]string{}
	total := 0
	for _, f := range files {
		br := bufio.NewReaderSize(f.R, 256<<10)
		shardIdx := -1
		for line := 1; ; line++ {
			b, err := readLine(br)
			if err == io.EOF {
				break
			}
			if err != nil {
				return total, fmt.Errorf("%s:%d: %w", f.Name, line, err)
			}
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			var rec record.Record
			if err := json.Unmarshal(b, &rec); err != nil {
				return total, fmt.Errorf("%s:%d: not a record: %w", f.Name, line, err)
			}
			idx, ok := shardOf(rec.ID)
			switch {
			case !ok:
				return total, fmt.Errorf("%s:%d: record %q is not a shard's (a sharded run's record ids start with their shard, s0/…): records of another run?", f.Name, line, rec.ID)
			case idx >= run.Sharding.Count:
				return total, fmt.Errorf("%s:%d: record %q is shard %d's, and run %s has %d shards", f.Name, line, rec.ID, idx, run.Sharding.Run, run.Sharding.Count)
			case shardIdx >= 0 && idx != shardIdx:
				return total, fmt.Errorf("%s:%d: record %q is shard %d's in a file of shard %d's", f.Name, line, rec.ID, idx, shardIdx)
			case shardIdx < 0 && fileOf[idx] != "":
				return total, fmt.Errorf("%s and %s both hold shard %d's records", fileOf[idx], f.Name, idx)
			case ids[rec.ID]:
				return total, fmt.Errorf("%s:%d: record %q appears twice", f.Name, line, rec.ID)
			case !rec.Wall.IsZero() && (rec.Wall.Before(from) || rec.Wall.After(to)):
				return total, fmt.Errorf("%s:%d: record %q was sent at %s, outside run %s (%s to %s): records of another run?",
					f.Name, line, rec.ID, rec.Wall.Format(time.RFC3339), run.Sharding.Run, run.Sharding.StartAt.Format(time.RFC3339), run.Ended.Format(time.RFC3339))
			}
			if shardIdx < 0 {
				shardIdx = idx
				fileOf[idx] = f.Name
			}
			ids[rec.ID] = true
			bw.Write(b)
			if b[len(b)-1] != '\n' {
				bw.WriteByte('\n')
			}
			total++
		}
	}
	return total, bw.Flush()
}

// shardOf reads the shard from a sharded run's record id, "s<I>/…".
func shardOf(id string) (int, bool) {
	p, _, ok := strings.Cut(id, "/")
	if !ok || len(p) < 2 || p[0] != 's' {
		return 0, false
	}
	i, err := strconv.Atoi(p[1:])
	return i, err == nil && i >= 0
}

// readLine returns one line, its newline included, however long up to
// maxRecordLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		b, err := br.ReadSlice('\n')
		line = append(line, b...)
		if len(line) > maxRecordLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxRecordLine)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}
