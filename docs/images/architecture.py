"""Draws docs/images/architecture.svg, the architecture's picture (docs/explanation/architecture.md):
the lab's rooms, and a registration (R), a Grade (G) and a course login (C) through them.

    python3 docs/images/architecture.py      writes the SVG beside this file

The picture reads without colour (black, white and grey; the paths told apart by their lines
and their numbered labels) and fetches nothing. tests/test_docs.py checks that the committed
SVG is what this script draws, so change the picture here, never in the SVG.
"""

from pathlib import Path

SVG = Path(__file__).with_suffix(".svg")
W, H = 1280, 970
out = []
def add(s):
    out.append(s)


def box(x, y, w, h, title, lines=(), kind="part"):
    """A room (its title at the top left) or a part (centred), with lines of notes."""
    add(f'<rect class="{kind}" x="{x}" y="{y}" width="{w}" height="{h}" rx="{10 if kind=="room" else 6}"/>')
    if kind == "room":
        add(f'<text class="room-title" x="{x+12}" y="{y+22}">{title}</text>')
        ty = y + 40
    else:
        add(f'<text class="part-title" x="{x+w/2}" y="{y+20}" text-anchor="middle">{title}</text>')
        ty = y + 38
    for line in lines:
        add(f'<text class="note" x="{x+w/2 if kind!="room" else x+12}" y="{ty}" text-anchor="{"middle" if kind!="room" else "start"}">{line}</text>')
        ty += 15


def arrow(points, style, label=None, at=None, both=False):
    """A path through points, its head at the end (both: at the start too), its label at `at`."""
    d = "M" + " L".join(f"{x},{y}" for x, y in points)
    start = ' marker-start="url(#head)"' if both else ""
    add(f'<path class="flow {style}" d="{d}" marker-end="url(#head)"{start}/>')
    if label:
        lx, ly = at if at else points[len(points)//2]
        add(f'<g class="step"><rect x="{lx-17}" y="{ly-10}" width="34" height="20" rx="10"/>'
            f'<text x="{lx}" y="{ly+5}" text-anchor="middle">{label}</text></g>')


add(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-labelledby="arch-title arch-desc" font-family="DejaVu Sans, Verdana, sans-serif">')
add('<title id="arch-title">The rooms of the Nightjar lab, and how a registration, a Grade and a course login travel through them</title>')
add('<desc id="arch-desc">Four rooms: the lab (the site, the console, the Workstation, the live database and the live RabbitMQ), '
    'the grader (the grading service, the grader, the sandbox and the grading RabbitMQ), the grading farm (its broker, the collector and the grading hosts), '
    'and the course (JupyterHub, the course RabbitMQ with a vhost per learner, one lab per learner, and the course service). '
    'Solid arrows R1 to R6 are a registration, dashed arrows G1 to G7 a Grade, dotted arrows C1 to C5 a course login; the text of the page lists each step.</desc>')
add('''<defs>
<marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="12" markerHeight="12" markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#111"/></marker>
<pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="8" stroke="#bbb" stroke-width="2"/></pattern>
<style>
.room { fill: #fff; stroke: #111; stroke-width: 2.5; }
.part { fill: #f2f2f2; stroke: #111; stroke-width: 1.5; }
.store { fill: #fff; stroke: #111; stroke-width: 1.5; }
.sandbox { fill: url(#hatch); stroke: #111; stroke-width: 2.5; stroke-dasharray: 10 4; }
.room-title { font-size: 16px; font-weight: bold; letter-spacing: 0.5px; fill: #111; }
.part-title { font-size: 14px; font-weight: bold; fill: #111; }
.note { font-size: 12px; fill: #222; }
.flow { fill: none; stroke: #111; stroke-width: 2; }
.registration { stroke-width: 2.5; }
.grade { stroke-dasharray: 9 5; }
.login { stroke-dasharray: 2 4; stroke-width: 2.5; stroke-linecap: round; }
.step rect { fill: #111; }
.step text { fill: #fff; font-size: 12px; font-weight: bold; }
.legend { font-size: 13px; fill: #111; }
</style>
</defs>''')
add(f'<rect x="0" y="0" width="{W}" height="{H}" fill="#fff"/>')

# A browser
Y = 30
box(20, 40+Y, 170, 76, "A browser", ["a learner's, or", "the instructor's"])

# THE LAB
box(230, 20+Y, 620, 350, "THE LAB", ["one learner's: docker compose up, make local, or a course's container"], kind="room")
box(250, 80+Y, 180, 64, "The site", ["Nightjar (Flask)"])
box(250, 210+Y, 180, 80, "The console", ["the page, its API,", "the terminal"])
box(470, 80+Y, 180, 64, "Live database", ["SQLite + the history"], kind="store")
box(470, 200+Y, 180, 110, "The Workstation", ["handler.py, worker.py,", "desk.py; the console's", "agent (bash on a PTY)"])
box(690, 80+Y, 140, 230, "Live RabbitMQ", ["nightjar.tickets", "nightjar.tickets.dead", "", "in a course: the", "learner's vhost on", "the course's broker"])

# THE GRADER
box(230, 410+Y, 620, 250, "THE GRADER", ["a second broker, throwaway databases: never the live jobs"], kind="room")
box(250, 470+Y, 180, 64, "Grading service", ["grades on request"])
box(250, 570+Y, 180, 70, "The grader", ["checks 1 to 6,", "its reports"])
box(455, 470+Y, 220, 170, "THE SANDBOX", ["a trial per check:", "workers importing handler.py,", "their own user, limits,", "root and network; a", "throwaway database", "", "(untrusted)"], kind="sandbox")
box(700, 470+Y, 130, 170, "Grading", ["RabbitMQ", "", "a vhost and a", "user per", "submission"])

# THE FARM
box(230, 700+Y, 620, 220, "THE GRADING FARM", ["any RabbitMQ the collector and the hosts reach"], kind="room")
box(250, 760+Y, 180, 140, "Grading hosts", ["python3 -m grader", "serve: each a grader", "with its sandbox", "and its own broker"])
box(455, 760+Y, 220, 140, "Farm RabbitMQ", ["nightjar.farm.jobs", "nightjar.farm.results.BATCH", "nightjar.farm.dead", "", "(quorum queues)"])
box(700, 760+Y, 130, 140, "The collector", ["python3 -m grader", "--handlers DIR", "--farm URL"])

# THE COURSE
box(890, 20+Y, 370, 900, "THE COURSE", ["on JupyterHub: configuration and glue"], kind="room")
box(910, 80+Y, 330, 150, "JupyterHub", ["the proxy: /hub/ and /user/NAME/", "the hub: login (NativeAuthenticator,", "OAuth or LTI 1.3), the spawner", "(Docker, swarm or Kubernetes),", "the idle culler"])
box(910, 280+Y, 220, 100, "The course's RabbitMQ", ["a vhost and a user", "per learner, with limits"])
box(910, 430+Y, 330, 130, "The learners' labs", ["one container each: THE LAB,", "its files a volume of its own,", "a network of its own;", "the console is the learner's", "single-user server"])
box(910, 610+Y, 330, 130, "The course's service", ["/services/nightjar/:", "the learners' Grade on the farm,", "the instructor's page, Grade all,", "the class report and CSV"])
add(f'<text class="note" x="925" y="{790+Y}">A lab reaches the hub\'s API and its own</text>')
add(f'<text class="note" x="925" y="{806+Y}">vhost: never another learner\'s lab, the</text>')
add(f'<text class="note" x="925" y="{822+Y}">service, the farm or the Docker socket.</text>')

# A registration (solid)
arrow([(190, 90+Y), (250, 105+Y)], "registration", "R1", at=(220, 80+Y))
arrow([(430, 100+Y), (470, 100+Y)], "registration", "R2", at=(450, 80+Y))
arrow([(430, 132+Y), (450, 132+Y), (450, 172+Y), (690, 172+Y)], "registration", "R3", at=(525, 172+Y))
arrow([(690, 230+Y), (650, 230+Y)], "registration", "R4", at=(670, 218+Y))
arrow([(600, 200+Y), (600, 144+Y)], "registration", "R5", at=(575, 188+Y))
arrow([(650, 285+Y), (690, 285+Y)], "registration", "R6", at=(670, 273+Y))

# A Grade (dashed)
arrow([(120, 116+Y), (120, 250+Y), (250, 250+Y)], "grade", "G1", at=(160, 250+Y))
arrow([(300, 290+Y), (300, 470+Y)], "grade", "G2", at=(300, 385+Y))
arrow([(340, 534+Y), (340, 570+Y)], "grade", "G3", at=(365, 552+Y))
arrow([(430, 605+Y), (455, 605+Y)], "grade", "G4", at=(443, 625+Y))
arrow([(675, 555+Y), (700, 555+Y)], "grade", "G5", at=(688, 535+Y), both=True)
arrow([(1075, 560+Y), (1075, 610+Y)], "grade", "G6", at=(1100, 585+Y))
arrow([(910, 700+Y), (870, 700+Y), (870, 830+Y), (830, 830+Y)], "grade", "G7", at=(870, 765+Y))
arrow([(700, 810+Y), (675, 810+Y)], "grade", None, both=True)
arrow([(455, 810+Y), (430, 810+Y)], "grade", None, both=True)

# A course login (dotted)
arrow([(105, 40+Y), (105, 12), (1200, 12), (1200, 80+Y)], "login", "C1", at=(560, 12))
arrow([(980, 230+Y), (980, 280+Y)], "login", "C2", at=(1005, 255+Y))
arrow([(1170, 230+Y), (1170, 430+Y)], "login", "C3", at=(1170, 330+Y))
arrow([(1220, 230+Y), (1220, 430+Y)], "login", "C4", at=(1220, 380+Y))
arrow([(1020, 430+Y), (1020, 380+Y)], "login", "C5", at=(1045, 405+Y), both=True)

# The legend
L = 330 + Y
add('<g class="legend">')
add(f'<text x="20" y="{L}" font-weight="bold">Paths</text>')
add(f'<line x1="20" y1="{L+20}" x2="70" y2="{L+20}" class="flow registration"/><text x="78" y="{L+25}">a registration (R)</text>')
add(f'<line x1="20" y1="{L+45}" x2="70" y2="{L+45}" class="flow grade"/><text x="78" y="{L+50}">a Grade (G)</text>')
add(f'<line x1="20" y1="{L+70}" x2="70" y2="{L+70}" class="flow login"/><text x="78" y="{L+75}">a course login (C)</text>')
add(f'<rect x="20" y="{L+88}" width="50" height="20" class="sandbox"/><text x="78" y="{L+103}">untrusted code</text>')
add(f'<rect x="20" y="{L+118}" width="50" height="20" class="store"/><text x="78" y="{L+133}">data that stays</text>')
add('</g>')
add('</svg>')


def drawn():
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    SVG.write_text(drawn(), encoding="utf-8")
