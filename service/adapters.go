package service

import (
	"herald/activities"
	"herald/signing"
)

// signerAdapter signs deliveries with the newest key.
type signerAdapter struct {
	s      *signing.Signer
	issuer string
}

func (a signerAdapter) SignDelivery(c activities.Claims) (string, error) {
	return a.s.SignDelivery(signing.DeliveryClaims{
		Issuer: a.issuer, Audience: c.Audience, Subject: c.Subject, EventID: c.EventID,
		Attempt: c.Attempt, BodySHA256: c.BodySHA256, TTL: c.TTL,
	})
}

// SignWebhook signs the Standard Webhooks headers with the newest key.
func (a signerAdapter) SignWebhook(id string, body []byte) (activities.WebhookHeaders, error) {
	w, err := a.s.SignWebhook(id, body)
	return activities.WebhookHeaders{ID: w.ID, Timestamp: w.Timestamp, Signature: w.Signature}, err
}
