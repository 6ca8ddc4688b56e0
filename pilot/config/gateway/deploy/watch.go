package deploy

import (
	"fmt"

	"k8s.io/client-go/tools/cache"
)

// sharedHandler is a handler this run added to an informer it does not
// own.
type sharedHandler struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// share adds h to inf, a shared informer started by its owner; the run
// waits for h to have seen inf's initial list, and removes h when it ends.
func (r *run) share(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		return fmt.Errorf("gateway deployment controller: handler: %w", err)
	}
	r.handlers = append(r.handlers, sharedHandler{inf, reg})
	r.synced = append(r.synced, inf.HasSynced, reg.HasSynced)
	return nil
}

// unshare removes the handlers share added.
func (r *run) unshare() {
	for _, h := range r.handlers {
		_ = h.inf.RemoveEventHandler(h.reg)
	}
}
