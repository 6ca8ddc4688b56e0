package gateway

// Translations is how many translations c made.
func (c *Controller) Translations() int64 { return c.translations.Load() }
