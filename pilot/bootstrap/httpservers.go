package bootstrap

import (
	"net/http"
	"time"

	"github.com/meshpilot/meshpilot/internal/httpserve"
)

// debugWriteTimeout is the write timeout of a server that serves /debug/*:
// pprof refuses a profile or trace whose ?seconds reaches the server's
// write timeout, and go tool pprof asks for 30 s by default.
const debugWriteTimeout = 5 * time.Minute

// httpLimits are the limits of one of istiod's HTTP servers: HTTPLimits,
// with room for profiles on a server that serves /debug/*.
func (s *Server) httpLimits(servesDebug bool) httpserve.Limits {
	l := s.opts.HTTPLimits
	if servesDebug && l.WriteTimeout >= 0 && l.WriteTimeout < debugWriteTimeout {
		l.WriteTimeout = debugWriteTimeout
	}
	return l
}

// newHTTPServer builds the server of --httpAddr, --monitoringAddr or
// --debugAddr; servesDebug says whether h serves /debug/*.
func (s *Server) newHTTPServer(name string, h http.Handler, servesDebug bool) *httpserve.Server {
	return httpserve.New(name, h, s.httpLimits(servesDebug), s.log)
}

// debugOnHTTP reports whether --httpAddr serves /debug/* too (httpMux).
func (s *Server) debugOnHTTP() bool { return s.opts.DebugAddr == "" && s.opts.EnableDebugOnHTTP }
