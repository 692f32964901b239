package workflows

// Carry is the state a delivery workflow hands to its next run.
type Carry struct{}
