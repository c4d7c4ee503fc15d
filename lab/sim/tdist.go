package sim

import "math"

// StudentTQuantile is the p-quantile of Student's t distribution with df
// degrees of freedom (df > 0, 0 < p < 1), found by bisection on the CDF
// written with the regularized incomplete beta function. It is exact to
// about 1e-12, enough for confidence intervals; NaN for arguments outside the
// domain. (gonum's distuv is not in this module's graph, and one function
// does not justify adding it.)
func StudentTQuantile(p, df float64) float64 {
	if !(p > 0 && p < 1) || !(df > 0) || math.IsInf(df, 0) {
		return math.NaN()
	}
	if p == 0.5 {
		return 0
	}
	if p < 0.5 {
		return -StudentTQuantile(1-p, df)
	}
	lo, hi := 0.0, 1.0
	for StudentTCDF(hi, df) < p {
		lo, hi = hi, 2*hi
		if hi > 1e300 {
			return math.Inf(1)
		}
	}
	for i := 0; i < 200 && hi-lo > 1e-14*hi; i++ {
		mid := lo + (hi-lo)/2
		if StudentTCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// StudentTCDF is P(T ≤ t) for Student's t with df degrees of freedom.
func StudentTCDF(t, df float64) float64 {
	if math.IsNaN(t) || !(df > 0) {
		return math.NaN()
	}
	x := df / (df + t*t)
	tail := 0.5 * regIncBeta(df/2, 0.5, x) // P(T > |t|)
	if t >= 0 {
		return 1 - tail
	}
	return tail
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by the
// continued fraction of Numerical Recipes (betacf, modified Lentz).
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

func betaCF(a, b, x float64) float64 {
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1/lentzNonzero(1-qab*x/qap)
	h := d
	for m := 1; m <= 1000; m++ {
		fm := float64(m)
		m2 := 2 * fm
		var del float64
		c, d, del = lentzStep(fm*(b-fm)*x/((qam+m2)*(a+m2)), c, d)
		h *= del
		c, d, del = lentzStep(-(a+fm)*(qab+fm)*x/((a+m2)*(qap+m2)), c, d)
		h *= del
		if math.Abs(del-1) < 1e-16 {
			break
		}
	}
	return h
}

// lentzStep is one step of the modified Lentz method for the continued
// fraction of betaCF: with the next coefficient aa, the state (c, d)
// becomes (c', d') and the fraction is multiplied by del.
func lentzStep(aa, c, d float64) (c2, d2, del float64) {
	d = 1 / lentzNonzero(1+aa*d)
	c = lentzNonzero(1 + aa/c)
	return c, d, d * c
}

// lentzNonzero keeps the method off a division by zero: a value nearer to
// zero than 1e-300 becomes 1e-300.
func lentzNonzero(v float64) float64 {
	const tiny = 1e-300
	if math.Abs(v) < tiny {
		return tiny
	}
	return v
}
