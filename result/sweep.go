package result

// A sweep's curve (METHOD §3, sweeps): per context row, the latency of
// each measured cell against its achieved request rate, where the curve
// bends (its knee), and the highest rate that met the run's SLOs. Package
// sweep computes them from the row's cells; reports draw them from here.

// Knee metrics: the median each knee is found on.
const (
	KneeTTFT = "ttft_p50"
	KneeTBT  = "tbt_p50"
)

// SweepRow is one context row of a sweep.
type SweepRow struct {
	Context int `json:"context"`
	// Tail is the percentile, in percent, of the curve's upper lines: the
	// run's highest (Settings.Percentiles).
	Tail float64 `json:"tail_percentile"`
	// Points are the row's cells that show figures, by achieved rate.
	Points []SweepPoint `json:"points"`
	// LeftOut counts the row's cells not on the curve (no figures: over
	// capacity, failed, not run); LeftOutWhy says which and why.
	LeftOut    int    `json:"left_out,omitempty"`
	LeftOutWhy string `json:"left_out_why,omitempty"`
	// Knees are the bend of the median TTFT and of the median TBT.
	Knees []Knee `json:"knees"`
	// SLO is the highest rate that met the objectives; nil without --slo.
	SLO *SweepSLO `json:"slo,omitempty"`
}

// SweepPoint is one measured cell on the curve: a closed loop
// (Concurrency) or a rate cell (Rate, offered), at AchievedRate requests
// per second. A latency is 0 where the cell has none.
type SweepPoint struct {
	Concurrency  int     `json:"concurrency,omitempty"`
	Rate         float64 `json:"rate,omitempty"`
	AchievedRate float64 `json:"achieved_rate"`
	TTFTms       float64 `json:"ttft_ms,omitempty"`
	TTFTTailMs   float64 `json:"ttft_tail_ms,omitempty"`
	// TTFTAtLeast: the median TTFT lies among requests without a first
	// token, so it is a lower bound (Cell.TTFTAtLeast).
	TTFTAtLeast bool `json:"ttft_at_least,omitempty"`
	// TTFTKind is the cell's (Cell.TTFTOf): the TTFT curve and its knee
	// hold only the points of the rate cells' kind.
	TTFTKind  string  `json:"ttft_kind"`
	TBTms     float64 `json:"tbt_ms,omitempty"`
	TBTTailMs float64 `json:"tbt_tail_ms,omitempty"`
	// Attainment is the cell's share of requests that met every SLO.
	Attainment *float64 `json:"slo_attainment,omitempty"`
}

// Knee is where one latency curve bends (METHOD §3, sweeps): of the
// points it holds (Points of them), the measured one farthest below the
// straight line from its first point to its last, both axes scaled to
// the curve's span. Found is false, with Reason saying why, when the
// curve has too few points, rises too little (Growth, its last point's
// latency over its first's, under 1.5) or stays too near that line
// (Departure under 0.1).
type Knee struct {
	Metric string `json:"metric"`
	Found  bool   `json:"found"`
	Points int    `json:"points"`
	// Point is the knee's index in the row's Points (valid when Found).
	Point        int     `json:"point"`
	AchievedRate float64 `json:"achieved_rate,omitempty"`
	LatencyMs    float64 `json:"latency_ms,omitempty"`
	// Departure is the largest distance below the line, as a share of
	// the latency's rise (0 to 1); Growth as above.
	Departure float64 `json:"departure"`
	Growth    float64 `json:"growth"`
	Reason    string  `json:"reason,omitempty"`
}

// SweepSLO is the highest rate of a sweep's row that met the SLOs: the
// highest measured cell that, with every cell below it in the row, had
// at least Target of its requests meet every objective. A cell without
// figures or without an attainment counts as a miss.
type SweepSLO struct {
	Target float64 `json:"target"`
	// Met is that cell's index in Points, -1 when the first cell missed;
	// MetRate its achieved rate, MetAttainment its attainment.
	Met           int     `json:"met_point"`
	MetRate       float64 `json:"met_rate,omitempty"`
	MetAttainment float64 `json:"met_attainment,omitempty"`
	// MissedRate is the next cell's rate, the first that missed
	// (achieved, or offered where it shows no figures), and
	// MissedAttainment its attainment (nil: none); MissedRate 0: no cell
	// missed, the limit lies above the sweep's highest rate.
	MissedRate       float64  `json:"missed_rate,omitempty"`
	MissedAttainment *float64 `json:"missed_attainment,omitempty"`
	// Interpolated is an estimate, not a measurement: the rate between
	// MetRate and MissedRate where the attainment, taken as linear in
	// rate between the two cells, crosses Target (0: none to make).
	Interpolated float64 `json:"interpolated_rate,omitempty"`
	// AboveMiss counts cells above the first miss that met the target
	// again: not counted (a noisy pass above a miss).
	AboveMiss int `json:"met_above_miss,omitempty"`
}
