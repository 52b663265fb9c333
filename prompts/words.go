package prompts

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// words is the list prompt text is drawn from: common English words of at
// most 8 bytes, one token each in most tokenizers (and in the fake
// engine's), so a prompt's length is smooth in its number of words.
var words = strings.Fields(`
the of and to in is was for on that with as by at from his her they this
have had are not but were which one all their she there been has when who
will more would time if no out so said what up its about than into them
can only other new some could these two may then first any like now my
such make over our even most after also made many did before must through
back years where much your way well down should because each just those
people how too little state good very world still own see men work long
here between both life being under never day same another know while last
might us great old year off come since against go came right used take
three small house large water often below place around fact point again
city group number part system case week company area river light family
early music night table garden paper window story market letter summer
morning reason answer energy moment bridge forest island animal person
rather simple common public open clear quick strong ready second final
`)

// gen draws a deterministic word stream from a seed (splitmix64).
type gen struct {
	state    uint64
	sentence int // words left in the current sentence
}

// newGen seeds a stream from the salt, slot and context, so each
// (salt, slot, context) has its own text.
func newGen(salt string, slot, context int) *gen {
	h := fnv.New64a()
	h.Write([]byte(salt))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(slot)))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(context)))
	g := &gen{state: h.Sum64()}
	g.sentence = 8 + int(g.next()%16)
	return g
}

func (g *gen) next() uint64 {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// word draws the next word and whether a full stop ends it.
func (g *gen) word() (string, bool) {
	r := g.next()
	w := words[(r>>32)%uint64(len(words))]
	g.sentence--
	if g.sentence == 0 {
		g.sentence = 8 + int(r%16)
		return w, true
	}
	return w, false
}

// appendWord writes " word" (and a full stop at a sentence's end) to sb.
func (g *gen) appendWord(sb *strings.Builder) {
	w, stop := g.word()
	sb.WriteByte(' ')
	sb.WriteString(w)
	if stop {
		sb.WriteByte('.')
	}
}

// skipWord advances the stream by one word and returns the bytes
// appendWord would have written.
func (g *gen) skipWord() int {
	w, stop := g.word()
	if stop {
		return len(w) + 2
	}
	return len(w) + 1
}
