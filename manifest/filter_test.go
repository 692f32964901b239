package manifest

import (
	"strconv"
	"strings"
	"testing"
)

// TestSubscriptionFilters: a subscription may carry a CEL content filter; an
// invalid one refuses the manifest, naming the subscription and the problem.
func TestSubscriptionFilters(t *testing.T) {
	ok := `{"app":"billing","endpoint":"https://billing.internal","subscribes":[
	  {"type":"orders.order.placed","version":1,"filter":"data.total > 1000 && subject.startsWith(\"eu-\")"}]}`
	m, err := Parse("billing.json", []byte(ok))
	if err != nil {
		t.Fatalf("valid filter refused: %v", err)
	}
	if m.Subscribes[0].Filter == "" {
		t.Fatal("the filter was not read")
	}
	for filter, want := range map[string]string{
		`data.total >`: "does not compile",
		`subject`:      "want a bool",
		`nosuch == 1`:  "does not compile",
		// issue 26: a comparison CEL cannot charge before it runs, and
		// loops over literal lists beyond the cost limit whatever the event.
		`[[1]].exists(a, [[a, a]].exists(b, b == b))`:                                            "may be lists or maps",
		strings.Repeat(`[1,2,3,4,5,6,7,8,9,10].exists(x, `, 6) + "true" + strings.Repeat(")", 6): "too costly",
	} {
		doc := `{"app":"billing","endpoint":"https://billing.internal","subscribes":[
		  {"type":"orders.order.placed","version":1,"filter":` + strconv.Quote(filter) + `}]}`
		_, err := Parse("billing.json", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), "subscribes[0].filter") ||
			!strings.Contains(err.Error(), "orders.order.placed v1") || !strings.Contains(err.Error(), want) {
			t.Errorf("filter %q: %v; want the subscription named and %q", filter, err, want)
		}
	}
}
