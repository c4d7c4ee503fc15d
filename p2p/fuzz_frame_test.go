package p2p

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzFrame feeds arbitrary bytes to the frame reader with an arbitrary
// limit. The reader must never panic, never hand back more than the limit,
// consume exactly the header and the declared payload when it accepts, stop
// after the header when the declared length is over the limit (the payload
// is never read), and classify a stream that ends early as ErrTruncated.
// What writeFrame writes, readFrame reads back unchanged.
func FuzzFrame(f *testing.F) {
	f.Add([]byte{3, 'a', 'b', 'c'}, uint16(10))
	f.Add([]byte{0}, uint16(0))
	f.Add([]byte{}, uint16(10))
	f.Add([]byte{0x80}, uint16(10))
	f.Add([]byte{5, 'a', 'b'}, uint16(10))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, uint16(1024))
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, uint16(1024))
	f.Add([]byte{0x81, 0x01, 'x'}, uint16(200))
	f.Add(append([]byte{4}, "abcdextra"...), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, lim uint16) {
		limit := int(lim)
		src := bytes.NewReader(data)
		r := bufio.NewReader(src)
		got, err := readFrame(r, limit)

		// consumed is what readFrame took from the stream, whatever the
		// bufio layer read ahead.
		consumed := len(data) - src.Len() - r.Buffered()
		n, hdr := binary.Uvarint(data)
		switch {
		case err == nil:
			if hdr <= 0 {
				t.Fatalf("accepted a frame without a valid header: % x", data)
			}
			if len(got) > limit || uint64(len(got)) != n {
				t.Fatalf("payload of %d bytes, declared %d, limit %d", len(got), n, limit)
			}
			if !bytes.Equal(got, data[hdr:hdr+len(got)]) {
				t.Fatal("payload differs from the bytes after the header")
			}
			if consumed != hdr+len(got) {
				t.Fatalf("consumed %d bytes, frame is %d", consumed, hdr+len(got))
			}
		case errors.Is(err, ErrTooLarge):
			if hdr <= 0 || n <= uint64(limit) {
				t.Fatalf("ErrTooLarge for declared %d (header %d), limit %d", n, hdr, limit)
			}
			if consumed != hdr {
				t.Fatalf("read %d bytes past the header of an oversized frame", consumed-hdr)
			}
			if Code(err) != CodeTooLarge {
				t.Fatalf("code %q", Code(err))
			}
		case errors.Is(err, ErrTruncated):
			// Either the header or the payload is cut short by the end of
			// the stream.
			if hdr > 0 && uint64(len(data)-hdr) >= n {
				t.Fatalf("ErrTruncated with a complete frame: % x", data)
			}
			if consumed != len(data) {
				t.Fatalf("truncated, yet %d bytes left unread", len(data)-consumed)
			}
			if Code(err) != CodeTruncated {
				t.Fatalf("code %q", Code(err))
			}
		default:
			// The only other failure is a header that overflows a uint64
			// (binary.ReadUvarint gives up after MaxVarintLen64 bytes, one
			// byte before binary.Uvarint does). The server answers it with
			// CodeBadRequest, and nothing past the header was read.
			if hdr > 0 || hdr == 0 && len(data) < binary.MaxVarintLen64 {
				t.Fatalf("unexpected error %v for % x", err, data)
			}
			if consumed > binary.MaxVarintLen64 {
				t.Fatalf("read %d bytes for a bad header", consumed)
			}
		}

		// Round trip: a payload within the limit comes back unchanged.
		payload := data
		if len(payload) > limit {
			payload = payload[:limit]
		}
		var buf bytes.Buffer
		if err := writeFrame(&buf, payload, limit); err != nil {
			t.Fatalf("writeFrame within the limit: %v", err)
		}
		back, err := readFrame(bufio.NewReader(&buf), limit)
		if err != nil || !bytes.Equal(back, payload) || buf.Len() != 0 {
			t.Fatalf("round trip: %v, %d bytes left", err, buf.Len())
		}
		if len(data) > limit {
			if err := writeFrame(&buf, data, limit); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("writeFrame over the limit: %v", err)
			}
		}
	})
}
