package testkit

import "fmt"

// WatchVisibility polls seqs (the sequence numbers visible now, as a relay
// reading the log would see them) in a goroutine until the returned stop is
// called. stop returns an error if a number ever became visible behind a
// higher one already seen (an event the relay would skip), or the first
// error of seqs; nil otherwise.
func WatchVisibility(seqs func() ([]int64, error)) (stop func() error) {
	done := make(chan struct{})
	observed := make(chan error, 1)
	go func() {
		seen := map[int64]bool{}
		var maxSeen int64
		for {
			select {
			case <-done:
				observed <- nil
				return
			default:
			}
			visible, err := seqs()
			if err != nil {
				observed <- err
				return
			}
			pollMax := maxSeen
			for _, q := range visible {
				if !seen[q] {
					if q < maxSeen {
						observed <- fmt.Errorf("seq %d became visible after seq %d", q, maxSeen)
						return
					}
					seen[q] = true
				}
				pollMax = max(pollMax, q)
			}
			maxSeen = pollMax
		}
	}()
	return func() error {
		close(done)
		return <-observed
	}
}
