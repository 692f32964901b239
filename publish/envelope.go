package publish

import "herald/envelope"

// TimeLayout is how the envelope's time is written (envelope.TimeLayout).
const TimeLayout = envelope.TimeLayout
