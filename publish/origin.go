package publish

// Ways an event reaches Herald, recorded with it (events.published_via) so
// that an operator can tell who published what.
const (
	// ViaLibrary: a Go program calling the Publisher (the default).
	ViaLibrary = "library"
	// ViaCLI: `starter publish`.
	ViaCLI = "cli"
	// ViaHTTP: POST /v1/events; the request's Token names the bearer token.
	ViaHTTP = "http"
)

// origin returns how r reached Herald: the request's own Via when set, else
// the publisher's, else ViaLibrary; and the token name the request carries.
func (p *Publisher) origin(r Request) (via, token string) {
	via = r.Via
	if via == "" {
		via = p.via
	}
	if via == "" {
		via = ViaLibrary
	}
	return via, r.Token
}
