package dns

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// maxMessage is the largest DNS message (the TCP length prefix is 16 bits).
const maxMessage = 65535

// readResolvConf returns the nameservers of a resolv.conf file as
// host:port (port 53).
func readResolvConf(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("resolv.conf: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		// An IPv6 nameserver may carry a zone ("fe80::1%eth0").
		if _, err := netip.ParseAddr(fields[1]); err != nil {
			continue
		}
		out = append(out, net.JoinHostPort(fields[1], "53"))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("resolv.conf %s: %w", path, err)
	}
	return out, nil
}

// forward sends msg to the upstream resolvers in order, each given timeout,
// over the client's transport, and returns the first response whose ID
// matches. An upstream's truncated UDP response is returned as is: the
// client retries over TCP, and so do we then.
func forward(ctx context.Context, upstreams []string, msg []byte, tcp bool, timeout time.Duration) ([]byte, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("no upstream resolvers")
	}
	if len(msg) < 2 {
		return nil, errors.New("short message")
	}
	var errs []error
	for _, up := range upstreams {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		resp, err := exchange(ctx, up, msg, tcp, timeout)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	return nil, errors.Join(errs...)
}

func exchange(ctx context.Context, upstream string, msg []byte, tcp bool, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, upstream)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Closing the connection when ctx ends unblocks the read at once.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	id := binary.BigEndian.Uint16(msg)
	if tcp {
		if err := writeTCPMessage(conn, msg); err != nil {
			return nil, err
		}
		resp, err := readTCPMessage(conn)
		if err != nil {
			return nil, err
		}
		if len(resp) < 2 || binary.BigEndian.Uint16(resp) != id {
			return nil, errors.New("response with another ID")
		}
		return resp, nil
	}
	if _, err := conn.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, maxMessage)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		// A stray datagram with another ID is skipped, not taken.
		if n >= 12 && binary.BigEndian.Uint16(buf) == id {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

// readTCPMessage reads one length-prefixed message.
func readTCPMessage(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// writeTCPMessage writes msg with its length prefix, in one write.
func writeTCPMessage(w io.Writer, msg []byte) error {
	if len(msg) > maxMessage {
		return fmt.Errorf("message of %d bytes", len(msg))
	}
	buf := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(buf, uint16(len(msg)))
	copy(buf[2:], msg)
	_, err := w.Write(buf)
	return err
}
