package cli

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"herald/manifest"
	"herald/publish"
	"herald/workflows"
)

// validSubscriptionID reports whether s has the form of a subscription id,
// "<subscriber-app>:<event-type>@<version>" (docs/design.md#identifiers).
func validSubscriptionID(s string) bool {
	app, rest, ok := strings.Cut(s, ":")
	if !ok || !manifest.ValidAppID(app) {
		return false
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return false
	}
	if _, _, ok := manifest.SplitEventType(rest[:at]); !ok {
		return false
	}
	v, err := strconv.Atoi(rest[at+1:])
	return err == nil && manifest.ValidVersion(v) && strconv.Itoa(v) == rest[at+1:]
}

// checkSubscriptionFlag checks a --subscription value of cmd.
func checkSubscriptionFlag(cmd, s string) error {
	if !validSubscriptionID(s) {
		return usagef(topCommand(cmd), "%s: --subscription %q is not a subscription id "+
			"(<subscriber-app>:<event-type>@<version>, e.g. billing:contacts.person.updated@1)", cmd, s)
	}
	return nil
}

// checkSubjectFlag checks a --subject value of cmd as publishing does:
// 1 to 200 bytes of printable UTF-8.
func checkSubjectFlag(cmd, s string) error {
	problem := ""
	switch {
	case s == "":
		problem = "is empty"
	case len(s) > publish.MaxSubjectBytes:
		problem = fmt.Sprintf("is longer than %d bytes", publish.MaxSubjectBytes)
	case !utf8.ValidString(s):
		problem = "is not valid UTF-8"
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		problem = "has a control or non-printable character"
	}
	if problem != "" {
		return usagef(topCommand(cmd), "%s: --subject %s (a subject key is 1 to %d bytes of printable UTF-8)",
			cmd, problem, publish.MaxSubjectBytes)
	}
	return nil
}

// splitDeliveryID splits a delivery workflow id into its subscription id and
// subject key. The subscription id ends at the first ":" after "@<version>",
// because no part of it may hold a ":" or "@" of its own; the subject key,
// which may, is the rest.
func splitDeliveryID(id string) (subscription, subject string, ok bool) {
	subscription, subject, ok = workflows.SplitDeliveryID(id)
	if !ok || !validSubscriptionID(subscription) || subject == "" {
		return "", "", false
	}
	return subscription, subject, true
}

// subjectOf returns the subject key of a delivery workflow id, given its
// subscription when known (from the HeraldSubscription search attribute).
func subjectOf(id, subscription string) string {
	if subscription != "" {
		if subject, ok := strings.CutPrefix(id, workflows.DeliveryID(subscription, "")); ok {
			return subject
		}
	}
	_, subject, _ := splitDeliveryID(id)
	return subject
}
