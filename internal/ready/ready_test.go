package ready

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestSignal(t *testing.T) {
	s := New("test controller")
	if s.Done() {
		t.Fatal("Done before Mark")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Wait(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "test controller") {
		t.Fatalf("Wait on an ended context: %v, want context.Canceled naming the component", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(context.Background()) }()
	s.Mark()
	s.Mark() // idempotent
	if err := <-waited; err != nil || !s.Done() {
		t.Fatalf("after Mark: Wait %v, Done %v", err, s.Done())
	}
}
