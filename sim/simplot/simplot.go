// Package simplot draws rlsched sim's charts (gonum/plot, SVG): each
// policy's JCT distribution, its GPU utilisation over time and its users'
// waits. It writes to the writers it is handed and keeps nothing; the
// curves are taken from a Result and thinned, so a million jobs make a
// chart of a thousand points.
package simplot

import (
	"fmt"
	"image/color"
	"io"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/rlsched/rlsched/sim"
)

// Curve is one policy's line on a chart.
type Curve struct {
	Name string
	X, Y []float64
}

// maxPoints bounds a curve's points.
const maxPoints = 1000

// JCTCDF is r's cumulative distribution of job completion times, in
// hours: the fraction of jobs (Y) done within X.
func JCTCDF(r *sim.Result) Curve {
	c := Curve{Name: r.Policy.Name}
	v := make([]float64, 0, len(r.Jobs))
	for _, j := range r.Jobs {
		v = append(v, max(j.JCT().Hours(), 1.0/3600)) // a log axis: at least a second
	}
	slices.Sort(v)
	step := max(1, len(v)/maxPoints)
	for i := 0; i < len(v); i += step {
		c.X, c.Y = append(c.X, v[i]), append(c.Y, float64(i+1)/float64(len(v)))
	}
	if n := len(v); n > 0 && c.Y[len(c.Y)-1] != 1 {
		c.X, c.Y = append(c.X, v[n-1]), append(c.Y, 1)
	}
	return c
}

// Utilisation is r's share of the cluster's GPUs held over time: X in
// days from the first submission, Y in percent, one point per bucket
// (averaged to at most maxPoints).
func Utilisation(r *sim.Result) Curve {
	c := Curve{Name: r.Policy.Name}
	if r.GPUs == 0 || r.Bucket <= 0 {
		return c
	}
	per := max(1, (len(r.Busy)+maxPoints-1)/maxPoints)
	capacity := float64(r.GPUs) * r.Bucket.Seconds() * float64(per)
	for i := 0; i < len(r.Busy); i += per {
		sum := 0.0
		for _, b := range r.Busy[i:min(i+per, len(r.Busy))] {
			sum += b
		}
		c.X = append(c.X, (float64(i)*r.Bucket.Hours())/24)
		c.Y = append(c.Y, 100*sum/capacity)
	}
	return c
}

// Lines writes a chart of curves as SVG; logX puts X on a log scale.
func Lines(w io.Writer, title, xLabel, yLabel string, curves []Curve, logX bool) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	for i, c := range curves {
		if len(c.X) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(c.X))
		for k := range c.X {
			xy[k].X, xy[k].Y = c.X[k], c.Y[k]
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("cannot draw %s: %w", c.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(c.Name, l)
	}
	p.Add(plotter.NewGrid())
	return write(w, p)
}

// UserWaits writes a bar chart of the mean wait (hours) of the users
// with the most GPU-hours under the first policy (at most 15), one bar
// per policy.
func UserWaits(w io.Writer, ss []sim.Summary) error {
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = "Mean wait per user", "hours"
	if len(ss) == 0 || len(ss[0].Users) == 0 {
		return write(w, p)
	}
	var users []string
	for _, u := range ss[0].Users[:min(15, len(ss[0].Users))] {
		users = append(users, u.User)
	}
	width := vg.Points(40 / float64(len(ss)))
	for i, s := range ss {
		wait := map[string]float64{}
		for _, u := range s.Users {
			wait[u.User] = u.MeanWait / 3600
		}
		vals := make(plotter.Values, len(users))
		for k, u := range users {
			vals[k] = wait[u]
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("cannot draw %s: %w", s.Policy, err)
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Color = color.Transparent
		b.Offset = width * vg.Length(i-len(ss)/2)
		p.Add(b)
		p.Legend.Add(s.Policy, b)
	}
	p.Legend.Top = true
	p.NominalX(users...)
	p.X.Tick.Label.Rotation = 0.8
	p.X.Tick.Label.XAlign = -1
	return write(w, p)
}

func write(w io.Writer, p *plot.Plot) error {
	wt, err := p.WriterTo(9*vg.Inch, 5*vg.Inch, "svg")
	if err != nil {
		return fmt.Errorf("cannot draw the chart: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}
