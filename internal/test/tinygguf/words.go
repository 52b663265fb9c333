package tinygguf

import "strings"

// defaultWords is the built-in word list: common English words, lowercase
// a-z only. Each, after a space, is one token, and they are the only
// tokens the model emits. Words that could read badly when strung together
// at random are left out.
var defaultWords = strings.Fields(`
the of and to a in is it you that he was for on are with as his they be at
one have this from or had by not word but what some we can out other were all
there when up use your how said an each she which do their time if will way
about many then them write would like so these her long make thing see him two
has look more day could go come did number sound no most people my over know
water than call first who may down side been now find any new work part take
get place made live where after back little only round year came show every
good me give our under name very through just form sentence great think say
help low line differ turn cause much mean before move right old too same tell
does set three want air well also play small end put home read hand port large
spell add even land here must big high such follow act why ask change went
light kind off need house picture try us again animal point world near build
self earth head stand own page should country found answer school grow study
still learn plant cover food sun four between state keep eye never last let
thought city tree cross farm hard start might story saw far sea draw left late
run while press close night real life few north open seem together next white
begin got walk example ease paper group always music those both mark often
letter until mile river car feet care second book carry took science eat room
friend began idea fish mountain stop once base hear horse cut sure watch color
face wood main enough plain usual young ready above ever red list though feel
talk bird soon body dog family direct leave song measure door product black
short numeral class wind question happen complete ship area half rock order
fire south problem piece told knew pass since top whole king space heard best
hour better true during hundred five remember step early hold west ground
interest reach fast verb sing listen six table travel less morning ten simple
several vowel toward lay pattern slow center love money serve appear road map
rain rule pull cold notice voice unit power town fine certain fly fall lead
dark machine note wait plan figure star box noun field rest correct able pound
done beauty drive stood contain front teach week final gave green quick
develop ocean warm free minute strong special mind behind clear tail produce
fact street inch multiply nothing course stay wheel full force blue object
decide surface deep moon island foot system busy test record boat common gold
possible plane dry wonder laugh thousand ago ran check game shape hot miss
brought heat snow tire bring yes distant fill east paint language among grand
ball yet wave drop heart am present heavy dance engine position arm wide sail
material size vary settle speak weight general ice matter circle pair include
divide syllable felt perhaps pick sudden count square reason length represent
art subject region energy probable bed brother egg ride cell believe fraction
forest sit race window store summer train sleep prove leg exercise wall catch
mount wish sky board joy winter sat written wild instrument kept glass grass
cow job edge sign visit past soft fun bright gas weather month million bear
finish happy hope flower strange gone jump baby eight village meet root buy
raise solve metal whether push seven paragraph third shall held hair describe
cook floor either result hill safe cat century consider type law bit coast
copy phrase silent tall sand soil roll temperature finger industry value lie
natural view sense ear else quite case middle son lake moment scale loud
spring observe child straight consonant nation dictionary milk speed method
organ pay age section dress cloud surprise quiet stone tiny climb cool design
lot experiment bottom key iron single stick flat twenty skin smile hole trade
melody trip office receive row mouth exact symbol least wrote seed tone join
suggest clean lady yard rise oil touch grew cent mix team wire cost lost brown
wear garden equal sent choose fell fit flow fair bank collect save control
decimal gentle captain practice separate doctor please protect noon whose
locate ring character insect caught period indicate radio spoke atom history
effect electric expect crop modern element student corner party supply rail
imagine provide agree thus capital chair fruit rich thick process operate
guess necessary sharp wing create neighbor wash rather crowd corn compare poem
string bell depend tube famous dollar stream sight thin triangle planet hurry
chief clock mine tie enter major fresh search send yellow allow print spot
desert suit current lift rose continue block chart hat sell success company
subtract event particular deal swim term opposite shoe shoulder spread arrange
camp invent cotton born determine quart nine truck noise level chance gather
shop stretch throw shine property column molecule select gray repeat require
broad prepare salt nose plural claim continent oxygen sugar pretty skill
season solution magnet silver thank branch match suffix especially fig huge
sister steel discuss forward similar guide experience score apple bought led
pitch coat mass card band rope win dream evening condition feed tool total
basic smell valley nor double seat arrive master track parent shore division
sheet substance favor connect post spend chord glad original share station
bread charge proper bar offer segment instant market degree chick dear reply
drink occur support speech nature range steam motion path liquid log meant
quotient teeth shell neck
`)
